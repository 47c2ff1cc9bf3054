"""benchmarks/jobwatch.py's bookkeeping on hand-written command lines, log lines and samples (no
job, no Ray)."""

from __future__ import annotations

from benchmarks.jobwatch import cpu_at, cpu_by_role, role, step_of


def test_processes_are_named_by_what_they_are():
    assert role(["ray::MapWorker(MapBatches(DialogueStage)).submit"]) == "worker MapWorker"
    assert role(["ray::RowSink.put"]) == "worker RowSink" and role(["ray::IDLE"]) == "worker IDLE"
    assert role(["/x/site-packages/ray/core/src/ray/raylet/raylet", "--raylet_socket_name=/tmp/s"]) == "raylet"
    assert role(["/x/ray/core/src/ray/gcs/gcs_server", "--a=b"]) == "gcs_server"
    assert role(["/v/bin/python", "-u", "/x/ray/dashboard/dashboard.py", "--host=1"]) == "dashboard/dashboard"
    assert role(["/v/bin/python", "-u", "/x/ray/_private/log_monitor.py"]) == "_private/log_monitor"
    assert role([""]) == "?"


def test_the_step_is_read_from_the_pipelines_lines():
    assert step_of("== sessions ==") == "sessions"
    assert step_of("reflect it1: 400 reflection(s) to request, 0 already written") == "optimize: reflect it1"
    assert step_of("sessions it2: 3/40 turns") == "optimize: sessions it2"
    assert step_of("evaluate it1: 1,408/2,400 rows (58.7%)") == "optimize: evaluate it1"
    assert step_of("sessions: 0/1,600 turns (0.0%)") is None and step_of("evaluated it1") is None


def test_cpu_between_two_moments_is_interpolated_per_process_and_summed_by_role():
    a = [(10.0, 1.0), (12.0, 3.0), (14.0, 3.0)]
    assert cpu_at(a, 9.0) == 0.0 and cpu_at(a, 11.0) == 2.0 and cpu_at(a, 20.0) == 3.0
    procs = {(1, 0): {"role": "worker MapWorker", "cpu": a},
             (2, 0): {"role": "worker MapWorker", "cpu": [(11.0, 5.0), (13.0, 9.0)]},  # started after 10
             (3, 0): {"role": "driver", "cpu": [(10.0, 0.0), (14.0, 4.0)]}}
    # from 10 to 13: process 1 goes 1 -> 3; process 2, unseen at 10 (0), reaches 9; the driver 0 -> 3
    assert cpu_by_role(procs, 10.0, 13.0) == {"worker MapWorker": 11.0, "driver": 3.0}
