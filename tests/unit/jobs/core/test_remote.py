"""A run directory given as a URI (jobs/core/remote.py): a local copy, each part uploaded as the store
writes it, everything else when the job ends; against a `file://` folder and a local S3 server
(moto's, started here on a free port). No Ray."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pandas as pd
import pytest

from jobs.core import remote
from jobs.core.remote import RemoteRun, SyncError, is_uri, local_run_dir, mirrored, public_path, run_main
from jobs.core.schemas import RESPONSES
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError


def _rows(ids, status="ok"):
    return [{"context_id": str(i), "model": "m", "status": status, "response": f"answer {i}"} for i in ids]


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(remote.CACHE_ENV, str(folder))
    return folder


@pytest.fixture()
def bucket_dir(tmp_path):
    return tmp_path / "bucket" / "runs" / "x"


@pytest.fixture(scope="module")
def s3():
    """A local S3 endpoint (moto's server) on a free port, with a bucket `runs`."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        client.create_bucket(Bucket="runs")
        yield port, client
    server.stop()


def test_what_is_a_uri():
    assert is_uri("s3://bucket/run") and is_uri("file:///tmp/run") and is_uri("gs://b/r")
    assert not is_uri("runs/x") and not is_uri("/abs/run") and not is_uri("C://x") and not is_uri(Path("s3:/b"))


@pytest.mark.parametrize("uri", ["s3://AKIAFAKE:s3cr3tvalue@bucket/run",
                                 "s3://bucket/run?endpoint_override=h:9000&secret_key=s3cr3tvalue",
                                 "s3://bucket/run?session_token=s3cr3tvalue"])
def test_a_uri_with_credentials_is_refused_without_echoing_them(uri, cache):
    with pytest.raises(ConfigError, match="credentials") as err:
        RemoteRun(uri)
    assert "s3cr3tvalue" not in str(err.value) and "AWS_ACCESS_KEY_ID" in str(err.value)
    assert not cache.exists() or not any(cache.iterdir())  # nothing made before the refusal


def test_a_uri_pyarrow_cannot_open_names_it(cache):
    with pytest.raises(ConfigError, match="nosuchfs://b/r.*pyarrow cannot open"):
        RemoteRun("nosuchfs://b/r")


def test_parts_go_up_as_written_and_the_rest_at_the_end(bucket_dir, cache):
    # An earlier run left one part and its records there.
    earlier = TableStore(bucket_dir, RESPONSES, writer=True)
    first = earlier.append(_rows([1, 2]))
    (bucket_dir / "run_inputs.json").write_text("{}")
    uri = f"file://{bucket_dir}"

    run = RemoteRun(uri).open()
    try:
        assert run.local.parent == cache.resolve()
        assert _files(run.local) == {f"responses/{first.name}", "run_inputs.json"}  # downloaded
        store = TableStore(run.local, RESPONSES, writer=True)
        assert store.existing_keys() == {("1", "m"), ("2", "m")}  # what a resuming job skips

        (run.local / "run.json").write_text('{"method": "m"}')
        part = store.append(_rows([3]))
        # Up at once, with the run's records: a crash now loses nothing written.
        assert (bucket_dir / "responses" / part.name).is_file()
        assert (bucket_dir / "run.json").read_text() == '{"method": "m"}'

        (run.local / "report").mkdir()
        (run.local / "report" / "report.html").write_text("<html>")
        (run.local / "ray-logs").symlink_to(cache, target_is_directory=True)
        (run.local / "responses" / ".tmp-part-x.parquet").write_bytes(b"half")
        assert not (bucket_dir / "report").exists()  # not a part: waits for the end
        assert public_path(run.local / "report" / "report.html") == f"file://{bucket_dir}/report/report.html"
        assert remote.source_uri(str(run.local)) == uri and remote.source_uri("runs/x") == "runs/x"
    finally:
        run.close()
    assert (bucket_dir / "report" / "report.html").read_text() == "<html>"
    assert not (bucket_dir / "ray-logs").exists() and not list(bucket_dir.rglob(".tmp-*"))
    assert not run.local.exists()  # everything is up: the working copy is gone
    assert len(pd.read_parquet(bucket_dir / "responses")) == 3


def test_a_dropped_part_is_deleted_remotely(bucket_dir, cache):
    """Regression: a part `drop_failed` removes locally but not remotely would come back with
    the next download, and its failed rows with it."""
    TableStore(bucket_dir, RESPONSES, writer=True).append(_rows([1]) + _rows([2], status="error"))
    with mirrored(f"file://{bucket_dir}") as run:
        store = TableStore(run.local, RESPONSES, writer=True)
        assert store.drop_failed() == 1
        remote_parts = sorted(p.name for p in (bucket_dir / "responses").glob("part-*.parquet"))
        assert remote_parts == [p.name for p in store.parts()]  # before the job's end
    df = pd.read_parquet(bucket_dir / "responses")
    assert list(df["context_id"]) == ["1"] and list(df["status"]) == ["ok"]


def test_a_new_run_and_a_resumed_one_see_the_same_rows(bucket_dir, cache):
    with mirrored(f"file://{bucket_dir}") as run:
        TableStore(run.local, RESPONSES, writer=True).append(_rows([1, 2, 3]))
    with mirrored(f"file://{bucket_dir}") as again:
        assert TableStore(again.local, RESPONSES).read()["context_id"].tolist() == ["1", "2", "3"]


class _FlakyFs:
    """The real filesystem, with writes failing while `down` is set (a network outage)."""

    def __init__(self, fs):
        self._fs = fs
        self.down = False

    def open_output_stream(self, path):
        if self.down:
            raise OSError("connection refused (outage)")
        return self._fs.open_output_stream(path)

    def __getattr__(self, name):
        return getattr(self._fs, name)


def test_a_failed_upload_never_fails_the_write_and_is_sent_at_the_end(bucket_dir, cache, capsys):
    run = RemoteRun(f"file://{bucket_dir}").open()
    flaky = run.fs = _FlakyFs(run.fs)
    store = TableStore(run.local, RESPONSES, writer=True)
    flaky.down = True
    part = store.append(_rows([1]))  # the store's write succeeds; the upload waits
    store.append(_rows([2]))
    assert part.is_file() and not (bucket_dir / "responses").exists()
    assert capsys.readouterr().err.count("could not update") == 1  # said once, not per part
    with pytest.raises(SyncError, match=f"kept in {run.local}"):
        run.close()  # still down at the end: the copy is kept and named
    assert run.local.is_dir()
    flaky.down = False
    assert run.sync() == 2
    assert sorted(pd.read_parquet(bucket_dir / "responses")["context_id"]) == ["1", "2"]


def test_an_s3_run_directory_through_a_local_s3_server(s3, cache):
    port, client = s3
    uri = f"s3://runs/exp/001?endpoint_override=127.0.0.1:{port}&scheme=http"
    with mirrored(uri) as run:
        part = TableStore(run.local, RESPONSES, writer=True).append(_rows([1, 2]))
        keys = {o["Key"] for o in client.list_objects_v2(Bucket="runs", Prefix="exp/001/").get("Contents", [])}
        assert f"exp/001/responses/{part.name}" in keys  # up before the job ends
        (run.local / "train.log").write_text("done")
        assert public_path(run.local) == "s3://runs/exp/001"
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="runs", Prefix="exp/001/")["Contents"]}
    assert "exp/001/train.log" in keys and not any("/.probe-" in k for k in keys)
    with mirrored(uri) as again:
        assert len(TableStore(again.local, RESPONSES).read()) == 2


def test_a_missing_bucket_is_found_before_the_job_starts(s3, cache):
    port, _ = s3
    with pytest.raises(SyncError, match="cannot write the run directory s3://nobucket/x.*bucket exists"):
        RemoteRun(f"s3://nobucket/x?endpoint_override=127.0.0.1:{port}&scheme=http").open()


def test_run_main_gives_the_job_a_local_copy_and_uploads_it(bucket_dir, cache, monkeypatch):
    seen = {}

    def main():  # a job: Hydra would read run_dir from argv
        arg = next(a for a in sys.argv if a.startswith("run_dir="))
        seen["run_dir"] = Path(arg.split("=", 1)[1])
        (seen["run_dir"] / "run.json").write_text("{}")
        sys.exit(3)

    uri = f"file://{bucket_dir}"
    argv = ["jobs.pipeline", "experiment=x", f"run_dir={uri}"]
    monkeypatch.setattr(sys, "argv", list(argv))
    with pytest.raises(SystemExit) as done:
        run_main(main)
    assert done.value.code == 3  # the job's own exit code
    assert seen["run_dir"].parent == cache.resolve() and sys.argv == argv
    assert (bucket_dir / "run.json").is_file()


def test_run_main_refuses_a_uri_sweep(bucket_dir, cache, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["jobs.pipeline", "-m", f"run_dir=file://{bucket_dir}"])
    with pytest.raises(SystemExit) as done:
        run_main(lambda: pytest.fail("the job must not start"))
    assert done.value.code == 2 and "its own run directory" in capsys.readouterr().err


def test_a_uri_that_reaches_a_job_unmirrored_is_refused(tmp_path, monkeypatch):
    """Regression: `Path("s3://b/r").resolve()` is a local folder `s3:/b/r`: results would stay
    on the node while the user looks in the bucket."""
    with pytest.raises(ConfigError, match="command line of python -m jobs.pipeline"):
        local_run_dir("s3://bucket/run")
    monkeypatch.chdir(tmp_path)
    assert local_run_dir("runs/x") == str(tmp_path.resolve() / "runs" / "x")


class _FailingReads:
    """A filesystem whose reads fail (a key that may list but not read), the rest passed through."""

    def __init__(self, fs):
        self._fs = fs

    def open_input_stream(self, path):
        raise OSError(f"When reading information for key '{path}': AWS Error ACCESS_DENIED")

    def __getattr__(self, name):
        return getattr(self._fs, name)


def test_a_file_that_will_not_download_is_named_with_its_path(bucket_dir, cache):
    (bucket_dir / "responses").mkdir(parents=True)
    (bucket_dir / "responses" / "part-1.parquet").write_bytes(b"x")
    run = RemoteRun(f"file://{bucket_dir}")
    run.fs = _FailingReads(run.fs)
    with pytest.raises(SyncError) as caught:
        run.download()
    assert str(caught.value).startswith(f"cannot download file://{bucket_dir}/responses/part-1.parquet to "
                                        f"{run.local / 'responses' / 'part-1.parquet'} (When reading information")
    assert "then run the same command again" in str(caught.value)


def test_a_cache_folder_that_cannot_be_made_is_one_line_exit_1(bucket_dir, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(remote.CACHE_ENV, str(blocker / "cache"))
    monkeypatch.delenv("EVALCLUSTER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["jobs.pipeline", f"run_dir=file://{bucket_dir}"])
    with pytest.raises(SystemExit) as done:
        run_main(lambda: pytest.fail("the job must not start"))
    err = capsys.readouterr().err
    assert done.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: cannot make the local copy of file://{bucket_dir} in {blocker / 'cache'} (")
    assert f"set {remote.CACHE_ENV} to a folder this user can write" in err
