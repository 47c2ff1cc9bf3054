"""A run directory in an object store: `run_dir=s3://bucket/prefix/run` (or any URI that
`pyarrow.fs.FileSystem.from_uri` opens: `gs://`, `hdfs://`, `file://`), worked on through a local copy.

    python -m jobs.pipeline experiment=mentalbench run_dir=s3://bucket/runs/mb/001
    python -m jobs.pipeline ... run_dir='s3://bucket/runs/x?endpoint_override=minio:9000&scheme=http'
    python -m analysis.report s3://bucket/runs/mb/001

Why a local copy rather than pyarrow filesystems in every job: the run directory is a folder to
everything that touches it (the store's atomic rename and corrupt-part quarantine, Hydra's own
`.hydra/` and log files, the job log, the report's figures and HTML), and object stores have no
rename and no append. So a job downloads the run at its start into a fresh folder under
`$EVALCLUSTER_RUN_CACHE` (default `~/.cache/evalcluster/runs/`), runs on it exactly as on a local
run, and uploads:
- each part file the moment `TableStore` writes it, and deletes the remote part the moment the
  store drops one (the store's part hook), so a crash loses at most the work in flight, as
  locally; the run's small records (`run.json`, `run_inputs.json`, `input_report.json`) go up
  with each part;
- everything else (`<job>.log`, `.hydra/`, `report/`) when the job ends, whatever the end (done,
  error, Ctrl-C, SIGTERM from `ray job stop` or a pod's shutdown). Then the local copy is
  removed; it is kept (and named) when that upload fails.
Ray's session logs (the `ray-logs` link) stay on the node.

Credentials come only from the filesystem's standard environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ENDPOINT_URL..., e.g. from a Kubernetes Secret): the
URI is printed and recorded, so one that carries a key or a password is refused.

A remote path that cannot be read or written (a missing bucket, a refused key, a file that will
not download, a cache folder that cannot be made) is a `SyncError` naming the path and what to do;
`run_main` prints it as one line and exits 1 (EVALCLUSTER_DEBUG=1 adds the traceback).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import parse_qsl, urlsplit

from jobs.core import store
from jobs.core.rundir import RUN_FILE, RUN_INPUTS
from jobs.core.configfiles import ConfigError
from jobs.core.errors import print_error

__all__ = ["CACHE_ENV", "RemoteRun", "SyncError", "is_uri", "local_run_dir", "mirrored", "public_path",
           "run_main", "source_uri"]

log = logging.getLogger(__name__)

CACHE_ENV = "EVALCLUSTER_RUN_CACHE"  # where local copies of remote runs live
RECORDS = (RUN_FILE, RUN_INPUTS, "input_report.json")  # uploaded with every part
_SKIP_PREFIXES = (".tmp-", ".probe-")  # in-flight temp files and writability probes: never data
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")  # two letters at least: C:\ is a path
_OBJECT_STORES = ("s3", "gcs")  # a PUT there is atomic: no temp name needed

_active: dict[Path, "RemoteRun"] = {}  # local copy -> its remote run, for public_path


class SyncError(OSError):
    """The local copy could not be uploaded to the remote run directory; it names both."""


def is_uri(run_dir: str | Path) -> bool:
    """`scheme://...` with a scheme of two letters or more (a Windows drive is a path)."""
    return isinstance(run_dir, str) and bool(_SCHEME_RE.match(run_dir))


def _refuse_credentials(uri: str) -> None:
    parts = urlsplit(uri)
    named = [k for k, _ in parse_qsl(parts.query) if any(w in k.lower() for w in _SECRET_WORDS)]
    if parts.username or parts.password or named:
        where = f"query keys {named}" if named else "user:password@ in the URI"
        raise ConfigError(
            f"run_dir carries credentials ({where}): a run directory is printed, logged and recorded, "
            "so keys never go in it. Set them in the environment instead (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; on Kubernetes from a Secret) and pass the URI "
            "without them, e.g. s3://bucket/runs/x?endpoint_override=host:9000")


def _open(uri: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    _refuse_credentials(uri)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError, TypeError) as exc:
        raise ConfigError(f"run_dir {uri}: pyarrow cannot open this URI ({exc}); use s3://bucket/prefix "
                          "(endpoint_override=HOST:PORT&scheme=http for MinIO), gs://, hdfs:// or "
                          "file:///path, with credentials in the environment") from exc
    return fs, root.rstrip("/")


class RemoteRun:
    """One remote run directory and its local working copy.

    Args:
        uri: the run directory's URI (its query string holds filesystem options such as
            `endpoint_override`).
        cache_root: where the local copy is made (default `$EVALCLUSTER_RUN_CACHE`, else
            `~/.cache/evalcluster/runs`); each copy is a fresh folder, so two jobs on one node
            never share one.
    """

    def __init__(self, uri: str, cache_root: str | Path | None = None):
        self.uri = uri
        self.fs, self.root = _open(uri)
        # The URI without its options, for messages: file:///abs/path keeps its third slash.
        self.display = f"{urlsplit(uri).scheme}://{self.root}"
        cache = Path(cache_root or os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "evalcluster" / "runs")
        tag = hashlib.sha256(uri.encode()).hexdigest()[:12]
        try:
            cache.mkdir(parents=True, exist_ok=True)
            self.local = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=cache)).resolve()
        except OSError as exc:
            raise SyncError(f"cannot make the local copy of {self.display} in {cache} ({exc.strerror or exc}): "
                            f"set {CACHE_ENV} to a folder this user can write") from exc
        self._synced: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns) uploaded
        self._removed: set[str] = set()  # remote deletions that failed: tried again at sync
        self._warned = False

    # -- remote paths --------------------------------------------------------------------------
    def _remote(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _rel(self, path: str | Path) -> str | None:
        """`path` relative to the local copy, or None when it lies outside it."""
        try:
            return Path(path).resolve().relative_to(self.local).as_posix()
        except ValueError:
            return None

    # -- down ----------------------------------------------------------------------------------
    def download(self) -> int:
        """Copy the remote run into the local copy (nothing if it is new) after checking that
        the remote place takes a file: a missing bucket or a read-only key is found now, not
        after an hour of paid calls. Returns the files copied."""
        import pyarrow.fs as pafs

        probe = f".probe-{uuid.uuid4().hex[:8]}"
        try:
            self._put_bytes(probe, b"probe")
            self.fs.delete_file(self._remote(probe))
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise SyncError(f"cannot write the run directory {self.display} ({exc}): check the bucket "
                            "exists, the endpoint (endpoint_override=...) and the credentials in "
                            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY") from exc
        n = 0
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(self.root):].lstrip("/")
            if not rel or Path(rel).name.startswith(_SKIP_PREFIXES):
                continue
            dest = self.local / rel
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                with self.fs.open_input_stream(info.path) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            except OSError as exc:
                raise SyncError(f"cannot download {self.display}/{rel} to {dest} ({exc}): check the credentials "
                                f"can read it and the disk under {self.local} has room, then run the same "
                                "command again") from exc
            self._synced[rel] = _stamp(dest)
            n += 1
        return n

    # -- up ------------------------------------------------------------------------------------
    def _put_bytes(self, rel: str, data: bytes) -> None:
        self._put(rel, lambda out: out.write(data))

    def _put(self, rel: str, write: Callable[[Any], Any]) -> None:
        """Write one remote file whole: an object store's PUT is atomic; elsewhere (file://,
        hdfs://) a temp name is renamed into place, so a reader never sees half a part."""
        target = self._remote(rel)
        atomic = self.fs.type_name in _OBJECT_STORES
        tmp = target if atomic else f"{self.root}/{Path(rel).parent.as_posix()}/.tmp-{uuid.uuid4().hex[:8]}"
        for attempt in (0, 1):
            try:
                with self.fs.open_output_stream(tmp) as out:
                    write(out)
                break
            except FileNotFoundError:  # a local or HDFS parent folder that does not exist yet
                if attempt:
                    raise
                self.fs.create_dir(tmp.rsplit("/", 1)[0], recursive=True)
        if not atomic:
            self.fs.move(tmp, target)

    def upload(self, path: str | Path) -> bool:
        """Upload one file of the local copy if it changed since its last upload; True if sent."""
        rel = self._rel(path)
        if rel is None:
            return False
        local = self.local / rel
        stamp = _stamp(local)
        if self._synced.get(rel) == stamp:
            return False
        with open(local, "rb") as src:
            self._put(rel, lambda out: shutil.copyfileobj(src, out, 1 << 20))
        self._synced[rel] = stamp
        self._removed.discard(rel)
        return True

    def remove(self, path: str | Path) -> None:
        """Delete the remote copy of a part the store dropped or moved aside."""
        rel = self._rel(path)
        if rel is None:
            return
        self._synced.pop(rel, None)
        try:
            self.fs.delete_file(self._remote(rel))
        except FileNotFoundError:
            pass  # never uploaded (written and dropped between two uploads)
        self._removed.discard(rel)

    def on_part(self, event: str, path: Path) -> None:
        """The store's hook: upload a written part (and the run's records), delete a dropped one.
        Never raises: the part is safe on disk, and what fails here is tried again at `sync`."""
        rel = self._rel(path)
        if rel is None:
            return
        try:
            if event == "removed":
                self._removed.add(rel)
                self.remove(path)
            else:
                self.upload(path)
                for name in RECORDS:
                    if (self.local / name).is_file():
                        self.upload(self.local / name)
        except Exception as exc:  # noqa: BLE001 - the write succeeded: a failed upload must not undo it
            if not self._warned:  # once: a network blip would otherwise print on every part
                self._warned = True
                msg = (f"warning: could not update {self.display} ({exc}); the rows are safe in "
                       f"{self.local} and are uploaded again when the job ends")
                print(msg, file=sys.stderr, flush=True)
            log.warning("upload of %s to %s failed: %s", rel, self.display, exc)

    def files(self) -> Iterator[Path]:
        """The local copy's files that belong to the run (no links: `ray-logs` stays on the node)."""
        for dirpath, dirnames, filenames in os.walk(self.local):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
            for name in filenames:
                p = here / name
                if not name.startswith(_SKIP_PREFIXES) and not p.is_symlink() and p.is_file():
                    yield p

    def sync(self) -> int:
        """Upload every file that changed since its last upload and finish failed deletions.
        Returns the files uploaded; SyncError names what could not be sent."""
        sent, failed = 0, []
        for rel in sorted(self._removed):
            try:
                self.remove(self.local / rel)
            except OSError as exc:
                failed.append(f"delete {rel}: {exc}")
        for path in self.files():
            try:
                sent += self.upload(path)
            except OSError as exc:
                failed.append(f"{self._rel(path)}: {exc}")
        if failed:
            raise SyncError(f"{len(failed)} file(s) of the run could not be uploaded to {self.display} "
                            f"({'; '.join(failed[:3])}); they are kept in {self.local}: copy them there "
                            f"(e.g. aws s3 sync {self.local} {self.display}) or re-run the same command")
        return sent

    # -- lifetime ------------------------------------------------------------------------------
    def open(self) -> "RemoteRun":
        """Download and start uploading parts as the store writes them."""
        self.download()
        _active[self.local] = self
        store.add_part_hook(self.on_part)
        return self

    def close(self, keep: bool = False) -> int:
        """Final upload; the local copy is removed once everything is up (kept when not, or
        when `keep`). Returns the files uploaded."""
        store.remove_part_hook(self.on_part)
        try:
            sent = self.sync()
        finally:
            _active.pop(self.local, None)
        if not keep:
            shutil.rmtree(self.local, ignore_errors=True)
        return sent


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def mirrored(uri: str, cache_root: str | Path | None = None) -> Iterator[RemoteRun]:
    """A remote run's local copy for the `with` block, uploaded at its end whatever the end."""
    run = RemoteRun(uri, cache_root).open()
    try:
        yield run
    finally:
        run.close()


def public_path(path: str | Path) -> str:
    """Where a file of a local copy lives remotely (`s3://bucket/run/report/report.html`), for
    messages: the local copy is gone once the job ends. Other paths are returned as they are."""
    for run in _active.values():
        rel = run._rel(path)
        if rel is not None:
            return f"{run.display}/{rel}".rstrip("/").removesuffix("/.")
    return str(path)


def source_uri(run_dir: str | Path) -> str:
    """The URI a local copy was made from, as given (options included), for a resume command;
    other paths are returned as they are."""
    for run in _active.values():
        if run._rel(run_dir) == ".":
            return run.uri
    return str(run_dir)


def local_run_dir(run_dir: str) -> str:
    """`run_dir` as an absolute local path; a URI reaching a job's config here was not mirrored
    by its entry (it came from a config file, or the command has no `run_main`): refused, since
    Hydra would have taken it for a relative folder named `s3:`."""
    if is_uri(run_dir):
        raise ConfigError(f"run_dir {run_dir}: a URI run directory is taken on the command line of "
                          "python -m jobs.pipeline (run_dir=URI), which works on a local copy and "
                          "uploads it; put it there rather than in a config file")
    return str(Path(run_dir).resolve())


def _run_dir_arg(args: list[str]) -> tuple[int, str, str] | None:
    """(index, prefix, value) of the last `run_dir=` override that is a URI, else None."""
    found = None
    for i, arg in enumerate(args):
        m = re.match(r"^(\+{0,2}run_dir=)(.*)$", arg)
        if m:
            found = (i, m.group(1), m.group(2)) if is_uri(m.group(2)) else None
    return found


def run_main(main: Callable[[], Any]) -> None:
    """Call a job's Hydra `main`; a `run_dir=URI` on its command line is worked on through a
    local copy (the override is swapped for the copy's path before Hydra reads it, so Hydra's
    own files land there too) and uploaded when the job ends. Exits with the job's code; 1 when
    its results could not be uploaded."""
    found = _run_dir_arg(sys.argv)
    if found is None:
        main()
        return
    i, prefix, uri = found
    if any(a in ("-m", "--multirun") for a in sys.argv[1:]):
        print(f"error: run_dir={uri}: a sweep gives each point its own run directory; submit one job per "
              "point with its own run_dir=URI", file=sys.stderr)
        sys.exit(2)
    try:
        run = RemoteRun(uri).open()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SyncError as exc:  # it names the path and what to do
        print_error(exc)
        sys.exit(1)
    except OSError as exc:  # pyarrow's own, from a call not wrapped above: name the run directory
        print_error(SyncError(f"run directory {uri}: {exc}; check the URI, the endpoint and the credentials")
                    .with_traceback(exc.__traceback__))
        sys.exit(1)
    print(f"run directory {run.display}: working copy in {run.local}", flush=True)
    argv = list(sys.argv)
    sys.argv[i] = f"{prefix}{run.local}"
    code: Any = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv[:] = argv
        try:
            sent = run.close()
            print(f"run directory {run.display}: up to date ({sent} file(s) uploaded)", flush=True)
        except SyncError as exc:
            print_error(exc)
            code = code or 1
    if code in (130, 143):
        print(f"the run is saved in {run.display}; resume it with the same command (run_dir={uri})",
              file=sys.stderr, flush=True)
    sys.exit(code)
