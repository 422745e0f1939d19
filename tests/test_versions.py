"""A version is what the file holds, not what stat says (STYLE.md 22): where timestamps are coarse
and inode numbers come back, a later version can carry an earlier one's signature.  Each case
here lost acknowledged writes, or served a stale version, before the writer read what it locked
and the reader told racy versions apart by their content; and the cases a probe of the writer
found beside them (threads, sizes, a bind mount, a save just before the rename)."""

import contextlib
import errno
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple, cast

import pytest
import test_writer
from helpers import TOKEN_A, accounts_document, eventually, serving, upsert, write_json
from test_writes import send

import app as service
import store

DIGEST_A = hashlib.sha256(TOKEN_A.encode()).digest()
#: One request of the scenario: (which server, method, path, body) -> (status, JSON or None).
Ask = Callable[[str, str, str, Any], Tuple[int, Any]]


def two_writers(ask: Ask, rounds: int = 10) -> Tuple[int, int]:
    """The probe's scenario, within a second a round: B upserts, A upserts twice (each version the
    same size), B is read, B upserts.  Return how many of A's acknowledged writes were lost and
    how many reads through B were stale."""
    lost = stale = 0
    for r in range(rounds):
        assert ask("B", "POST", "/v2/queues", {"queueName": "b", "parallelism": 1})[0] == 200
        last = r % 4 + 5
        for parallelism in (r % 4 + 1, last):  # each version the same size
            body = {"queueName": "a", "parallelism": parallelism}
            assert ask("A", "POST", "/v2/queues", body)[0] == 200
        status, read = ask("B", "GET", "/v2/queues/a", None)
        stale += (status, read["parallelism"]) != (200, last)
        assert ask("B", "POST", "/v2/queues", {"queueName": "b", "parallelism": 2})[0] == 200
        status, read = ask("A", "GET", "/v2/queues/a", None)
        lost += (status, read["parallelism"]) != (200, last)
    return lost, stale


def coarse(monkeypatch: Any) -> None:
    """Make this process see the timestamps of a filesystem of one-second granularity."""
    real = store._signature

    def signature(st: os.stat_result) -> Any:
        found = real(st)
        return found._replace(
            mtime_ns=found.mtime_ns - found.mtime_ns % 10**9,
            ctime_ns=found.ctime_ns - found.ctime_ns % 10**9,
        )

    monkeypatch.setattr(store, "_signature", signature)


def test_two_writing_processes_on_coarse_timestamps_lose_nothing(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Without root: two writable DataFiles (as two processes) on one file, whose signatures this
    process sees with whole seconds only, as ext3, HFS+ or ext4 with 128-byte inodes give them."""
    coarse(monkeypatch)
    path = write_json(tmp_path / "data.json", accounts_document())
    apps = {
        name: service.create_app(service.open_data(str(path), None, 3600, writable=True), False)
        for name in "AB"
    }

    def ask(which: str, method: str, route: str, body: Any) -> Tuple[int, Any]:
        response = send(apps[which], method, route, body)
        return response.status, json.loads(response.body) if response.body else None

    assert two_writers(ask) == (0, 0)


@contextlib.contextmanager
def coarse_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A loop-mounted ext4 of 128-byte inodes (one-second timestamps); skipped where the machine
    cannot make one (not root, no loop device, no mkfs.ext4)."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        pytest.skip(
            "a loop-mounted filesystem: run it as root, with mkfs.ext4 (apt-get install e2fsprogs)"
        )
    image, mount = tmp_path / "ext4.img", tmp_path / "coarse"
    mount.mkdir()
    with image.open("wb") as file:
        file.truncate(32 << 20)
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-I", "128", str(image)], capture_output=True, text=True
    )
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True
    )
    if made.returncode or mounted.returncode:
        pytest.skip(
            "cannot loop-mount ext4: run it as root with loop devices (docker --privileged): %s"
            % (made.stderr + mounted.stderr)
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_two_writing_servers_on_a_coarse_filesystem_lose_nothing(tmp_path: Path) -> None:
    """The probe's own case: two `python app.py --writable` on a real one-second filesystem."""
    with coarse_filesystem(tmp_path) as folder:
        path = write_json(folder / "data.json", accounts_document())
        with (
            serving(path, "--writable", "--quiet") as a,
            serving(path, "--writable", "--quiet") as b,
        ):
            servers = {"A": a, "B": b}

            def ask(which: str, method: str, route: str, body: Any) -> Tuple[int, Any]:
                return test_writer.ask(servers[which], method, route, TOKEN_A, body)

            assert two_writers(ask) == (0, 0)
            assert a.stop()[0] == 0 and b.stop()[0] == 0


def edited_in_place(path: Path, parallelism: int) -> None:
    """A save in place (as `>` and many editors do), of the same size each time."""
    document = accounts_document()
    document["accounts"][0]["queues"][0]["parallelism"] = parallelism
    with path.open("r+b" if path.exists() else "wb") as file:
        file.write(json.dumps(document, indent=2).encode())


def served_parallelism(data: store.DataFile) -> int:
    loaded = data.current()
    assert loaded is not None
    return next(iter(loaded.accounts[0].queues.values())).parallelism


@pytest.mark.parametrize("where", ["coarse timestamps", "a coarse filesystem"])
def test_an_in_place_edit_of_the_same_size_soon_after_a_load_is_served(
    tmp_path: Path, monkeypatch: Any, where: str
) -> None:
    """A read-only process; the file edited in place twice within a second of its last load, the
    same size each time: the second edit is served too (the version judged while its times were
    not yet safely past is compared by content at the next looks)."""
    with contextlib.ExitStack() as stack:
        folder = tmp_path
        if where == "coarse timestamps":
            coarse(monkeypatch)
        else:
            folder = stack.enter_context(coarse_filesystem(tmp_path))
        path = folder / "data.json"
        edited_in_place(path, 1)
        data = service.open_data(str(path), None, interval=0.05)
        stack.callback(data.close)
        for parallelism in (2, 3):
            # Both edits within one second: wait for the start of one.
            eventually(lambda: time.time() % 1 < 0.5)
            edited_in_place(path, parallelism)
            eventually(lambda n=parallelism: served_parallelism(data) == n, timeout=3)


def test_an_edit_during_a_slow_load_is_not_taken_for_the_version_loaded(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A version is judged as of its read's start: a load that takes seconds (a large file's
    parse) must not make an in-place edit of the same size, in the same second as the read,
    look safely old (it did: stale until the next change, and /healthz said not stale)."""
    coarse(monkeypatch)
    path = tmp_path / "data.json"
    real_time, real_parse, later = time.time, store.parse, [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + later[0])

    def slow(*args: Any, **keywords: Any) -> store.Store:
        parsed = real_parse(*args, **keywords)
        later[0] += 3.0  # the clock after a large file's parse
        return parsed

    monkeypatch.setattr(store, "parse", slow)
    eventually(lambda: real_time() % 1 < 0.5)  # the read and the edit in one second
    edited_in_place(path, 1)
    data = service.open_data(str(path), None, interval=3600)
    try:
        edited_in_place(path, 2)
        data.refresh()
        assert served_parallelism(data) == 2
    finally:
        data.close()


def test_a_version_whose_mtime_is_set_back_is_told_by_its_ctime(tmp_path: Path) -> None:
    """cp -p and tar set a file's mtime back, not its ctime: a version of the same size with the
    mtime of the one judged, long after it (not racy), is read."""
    path = tmp_path / "data.json"
    edited_in_place(path, 1)
    before = path.stat()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns - 10 * 10**9))  # long ago
    data = service.open_data(str(path), None, interval=3600)
    eventually(lambda: time.time_ns() > path.stat().st_ctime_ns + 10**7)  # a later ctime
    old = path.stat().st_mtime_ns
    edited_in_place(path, 2)
    os.utime(path, ns=(old, old))
    assert data.refresh() is True and served_parallelism(data) == 2
    data.close()


# ---- What the probe found beside it ------------------------------------------------------------
def test_writes_recover_once_another_process_lets_go_of_the_lock(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A write that timed out waiting for another process's lock leaves no
    trace: once the lock is free, every write is made."""
    import fcntl

    monkeypatch.setattr(store, "LOCK_TIMEOUT", 0.2)
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)
    app = service.create_app(data, False)
    holder = os.open(str(path), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process, at work for longer than the timeout
    try:
        assert send(app, "POST", "/v2/queues", {"queueName": "held"}).status == 503
    finally:
        os.close(holder)
    statuses = [send(app, "POST", "/v2/queues", {"queueName": "q%d" % i}).status for i in range(10)]
    assert statuses == [200] * 10
    data.close()


def compact_file(path: Path, queues: int) -> bytes:
    """A file of one account and ``queues`` queues, written compactly as a tool writes QStash's
    answers (not the writer's layout, which puts each queue on a line of its own: larger)."""
    made = [
        {
            "createdAt": 1700000000000,
            "updatedAt": 1700000000000,
            "name": "q%06d" % i,
            "parallelism": 1,
            "lag": 0,
            "paused": False,
        }
        for i in range(queues)
    ]
    document = {"accounts": [{"token": TOKEN_A, "queues": made}]}
    raw = json.dumps(document, separators=(",", ":")).encode()
    path.write_bytes(raw)
    return raw


def test_no_write_makes_a_file_that_would_not_load_again(tmp_path: Path) -> None:
    """A compact file just under --max-size, which the writer's layout (a queue a line) takes past
    it: deletes are made (written compact: a user at the limit deletes their way out), each file
    under the limit and loading again; a write that takes even the compact file past it is a 507
    and the file is kept as it is."""
    path = tmp_path / "data.json"
    raw = compact_file(path, 2000)
    data = service.open_data(str(path), None, 3600, writable=True, max_size=len(raw) + 10)
    app = service.create_app(data, False)
    for i in range(10):
        assert send(app, "DELETE", "/v2/queues/q%06d" % i, None).status == 200
        assert len(path.read_bytes()) <= len(raw)
        assert "q%06d" % i not in store.load(str(path), None, max_size=len(raw)).accounts[0].queues
    before = path.read_bytes()
    big = {"queueName": "q" * 200, "parallelism": 1}  # room for 10 queues' names, not this one
    assert send(app, "POST", "/v2/queues", big).status == 200
    while send(app, "POST", "/v2/queues", dict(big, queueName="r%d" % len(before))).status == 200:
        before = path.read_bytes()
    assert path.read_bytes() == before
    data.close()


def test_a_single_file_bind_mount_is_named_with_its_fix(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """A rename over a file that is a mount point fails with EBUSY (docker -v ./data.json:...): a
    503, and one log line that names the data file and the fix, not the temporary file."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)

    def busy(*args: Any) -> Any:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))

    monkeypatch.setattr(os, "replace", busy)
    response = send(service.create_app(data, False), "POST", "/v2/queues", {"queueName": "q"})
    assert response.status == 503
    lines = [r.getMessage() for r in caplog.records if "mount" in r.getMessage()]
    assert lines == [
        "%s: cannot write: the file is a mount point (a single-file bind mount, such as docker "
        "-v ./data.json:/app/data.json); mount its folder instead and point --data at the file in "
        "it; it is unchanged" % path
    ]
    assert ".qstash-lists-tmp" not in caplog.text
    data.close()


def test_read_only_replicas_serve_a_write_at_their_next_look(tmp_path: Path) -> None:
    """What the README promises a read-only replica: a write another process answered is served
    from its next look at the file (--interval, or at once on SIGHUP), not its next request."""
    path = write_json(tmp_path / "data.json", accounts_document())
    writer = service.open_data(str(path), None, 3600, writable=True)
    replica = service.open_data(str(path), None, 3600)
    upsert(writer, DIGEST_A, "w", None, None)
    before = replica.current()
    assert before is not None and "w" not in before.accounts[0].queues
    assert replica.refresh() is True
    after = replica.current()
    assert after is not None and "w" in after.accounts[0].queues
    writer.close()
    replica.close()


# ---- Freshness from the file, never from a clock (STYLE.md 25) ----------------------------------
class NotingLock:
    """A lock that notes when the thread ``reader`` starts to wait for it."""

    def __init__(self, lock: Any, reader: List[threading.Thread], waiting: threading.Event) -> None:
        self._lock, self._reader, self._waiting = lock, reader, waiting

    def __enter__(self) -> None:
        if self._reader and threading.current_thread() is self._reader[0]:
            self._waiting.set()
        self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


def test_a_read_that_waits_behind_a_swap_serves_a_write_answered_after_the_rename(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Process A renames its version in; before A puts it in service, process B locks the renamed
    file, writes and answers; a read on A that began after B's answer (and waited for A's swap)
    serves B's write, not A's older version (a timestamp taken after A's rename said otherwise)."""
    path = write_json(tmp_path / "data.json", accounts_document())
    a = service.open_data(str(path), None, 3600, writable=True)
    b = service.open_data(str(path), None, 3600, writable=True)
    reader: List[threading.Thread] = []
    served: List[Optional[store.Store]] = []
    swapped: List[bool] = []
    waiting = threading.Event()
    monkeypatch.setattr(a, "_lock", NotingLock(a._lock, reader, waiting))
    real_replace = os.replace

    def replace(source: Any, target: Any) -> None:
        real_replace(source, target)
        if str(source).endswith(".qstash-lists-tmp") and not swapped:
            swapped.append(True)  # A's rename made; A not yet at its put
            assert upsert(b, DIGEST_A, "from-b", 1, None)
            reader.append(threading.Thread(target=lambda: served.append(a.current())))
            reader[0].start()
            waiting.wait()  # the read, begun after B's answer, waits for A's swap

    monkeypatch.setattr(os, "replace", replace)
    upsert(a, DIGEST_A, "from-a", 1, None)
    reader[0].join()
    assert served[0] is not None
    assert {"from-a", "from-b"} <= set(served[0].by_digest[DIGEST_A].queues)
    a.close()
    b.close()


# ---- A hand save in place, on whole-second timestamps, is never overwritten -------------------
@pytest.mark.parametrize("broken", [False, True], ids=["an-edit", "a-save-that-does-not-load"])
@pytest.mark.parametrize("where", ["coarse timestamps", "a coarse filesystem"])
def test_a_save_in_place_while_a_write_is_made_is_never_overwritten(
    tmp_path: Path, monkeypatch: Any, broken: bool, where: str
) -> None:
    """An editor saves in place (same size, same second: the same signature on a filesystem of
    whole-second timestamps) after the writer read the file and before its rename: an edit is
    kept and the write made on it; a save that does not load is kept and the write is a 409."""
    with contextlib.ExitStack() as stack:
        saved_in_place(stack, tmp_path, monkeypatch, broken, where)


def saved_in_place(
    stack: contextlib.ExitStack, tmp_path: Path, monkeypatch: Any, broken: bool, where: str
) -> None:
    if where == "coarse timestamps":
        coarse(monkeypatch)
        path = tmp_path / "data.json"
    else:
        path = stack.enter_context(coarse_filesystem(tmp_path)) / "data.json"
    eventually(lambda: time.time() % 1 < 0.5)  # the save within the second of the file's write
    edited_in_place(path, 1)
    data = service.open_data(str(path), None, 3600, writable=True)
    stack.callback(data.close)
    saved = path.read_bytes().replace(b'"parallelism": 1', b'"parallelism": 7')
    if broken:
        saved = saved.replace(b'"parallelism": 7', b'"parallelism": x')
    real_new_version, edits = store._new_version, cast(List[os.stat_result], [])

    @contextlib.contextmanager
    def new_version(*args: Any) -> Iterator[Any]:
        with real_new_version(*args) as new:
            if not edits:
                with open(path, "r+b") as editor:  # saved in place, as vim or VS Code save
                    editor.write(saved)
                edits.append(path.stat())
            yield new

    monkeypatch.setattr(store, "_new_version", new_version)
    app = service.create_app(data, False)
    response = send(app, "POST", "/v2/queues", {"queueName": "w"})
    if broken:
        assert (response.status, path.read_bytes()) == (409, saved)
    else:
        assert response.status == 200
        kept = store.load(str(path), None).by_digest[DIGEST_A].queues
        assert (kept["emails"].parallelism, "w" in kept) == (7, True)


def test_a_file_system_without_modes_or_owners_takes_writes_and_says_so_once(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """FAT through FUSE and some network shares refuse chmod and chown: keeping the old file's mode
    and owner is best effort there, each write is made, and one log line says so."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, 3600, writable=True)

    def refused(*args: Any) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "fchmod", refused)
    app = service.create_app(data, False)
    statuses = [send(app, "POST", "/v2/queues", {"queueName": "q%d" % i}).status for i in range(3)]
    assert statuses == [200, 200, 200]
    said = [r.getMessage() for r in caplog.records if "keeps no mode or owner" in r.getMessage()]
    assert said == [
        "%s: the file system keeps no mode or owner (%s): a new version gets its own"
        % (path, os.strerror(errno.EPERM))
    ]
    data.close()
