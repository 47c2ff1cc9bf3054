"""What a Serve deployment that fails or is late says (`serving.deploy_errors`): the model, the
app's state and cause, where its replica's log is, and what to do."""

from __future__ import annotations

import os
from types import SimpleNamespace

from serving.deploy_errors import app_cause, failure_message, replica_log, timeout_message


def test_replica_log_is_the_newest_of_the_apps_replica_logs(tmp_path):
    serve = tmp_path / "serve"
    serve.mkdir()
    for name, mtime in [("replica_m1_M_aaa.log", 100), ("replica_m1_M_bbb.log", 200), ("replica_m10_M_ccc.log", 300)]:
        (serve / name).write_text("x")
        os.utime(serve / name, (mtime, mtime))
    # the newest of m1's (the last start's), not m10's, whose name only begins alike
    assert replica_log("m1", tmp_path) == str(serve / "replica_m1_M_bbb.log")
    assert replica_log("m2", tmp_path) == (f"serve/replica_m2_*.log in the Ray logs of the node that ran it "
                                           f"({tmp_path} on this node, RUN_DIR/ray-logs)")
    assert replica_log("m2", None) == ("serve/replica_m2_*.log in the Ray logs of the node that ran it "
                                       "(ray logs cluster 'serve/replica_m2_*')")


def test_a_replica_that_failed_in_its_constructor_points_at_the_controller_log(tmp_path):
    """Seen with a model file naming a missing GGUF: Serve left the replica logs empty and wrote
    the FileNotFoundError to its controller's log."""
    serve = tmp_path / "serve"
    serve.mkdir()
    (serve / "replica_m_cpu-m_abc.log").write_text("")
    (serve / "controller_1885.log").write_text("FileNotFoundError: GGUF file not found")
    assert replica_log("m", tmp_path) == (f"{serve / 'replica_m_cpu-m_abc.log'}; a start-up error is in Serve's "
                                          f"controller log, {serve / 'controller_1885.log'}")
    (serve / "replica_m_cpu-m_abc.log").write_text("engine died")  # a replica that ran: its own log only
    assert replica_log("m", tmp_path) == str(serve / "replica_m_cpu-m_abc.log")


def test_app_cause_is_the_last_line_of_the_deployments_message():
    status = SimpleNamespace(message="app failed", deployments={
        "LlamaCpp": SimpleNamespace(message="The deployment failed to start 3 times in a row.\nTraceback ...\n"
                                            "  File x\nFileNotFoundError: model file /m/x.gguf not found\n")})
    assert app_cause(status) == "FileNotFoundError: model file /m/x.gguf not found"
    assert app_cause(SimpleNamespace(message="only the app's", deployments={})) == "only the app's"
    assert app_cause(None) == ""


def test_failure_and_timeout_messages_name_the_model_the_log_and_what_to_do():
    msg = failure_message("gemma3-270m", "gemma3-270m", "ApplicationStatus.DEPLOY_FAILED", "OSError: no such file",
                          "/logs/serve/replica_gemma3-270m_X_1.log")
    assert msg.startswith("deploying model 'gemma3-270m' failed (Serve app 'gemma3-270m': DEPLOY_FAILED; "
                          "OSError: no such file); its replica's log: /logs/serve/replica_gemma3-270m_X_1.log. ")
    assert "serve delete gemma3-270m" in msg and "\n" not in msg
    late = timeout_message("m", "http://h:8000/m/v1/models", 900, "DEPLOYING", "L")
    assert late == ("model 'm' was not ready at http://h:8000/m/v1/models after 900s (Serve app state: DEPLOYING); "
                    "its replica's log: L. If it is still loading, raise serving.startup_timeout_s; else fix what "
                    "the log shows")
    assert "serving.deploy=false: it is served elsewhere" in timeout_message("m", "u", 2, "", None)
