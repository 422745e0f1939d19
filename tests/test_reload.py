"""Live reload: new content is picked up by the reloader, bad content never replaces good,
readers never see a mix, and no file (a FIFO, a device, a huge or a busy one) stops it."""

import ctypes
import functools
import gc
import hashlib
import json
import logging
import os
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, cast

import pytest
from helpers import Q_TEMPLATE, TOKEN_A, bearer, call, eventually, upsert, write_json

import app as service
import store


def read_file(path: str, max_size: int = store.DEFAULT_MAX_SIZE) -> Any:
    """The version of the file that a load reads."""
    with store._opened(path, max_size) as (_, found):
        return found


def version(n: int, queues: int = 50) -> Dict[str, Any]:
    """A file whose every queue name says which version it belongs to."""
    return {
        "accounts": [
            {
                "token": TOKEN_A,
                "queues": [dict(Q_TEMPLATE, name="v%d-%d" % (n, i)) for i in range(queues + n)],
            }
        ]
    }


def names(response: Any) -> List[str]:
    return [q["name"] for q in response.json()]


def served(data: store.DataFile) -> str:
    """The name of the first queue in service: it says which version is loaded."""
    loaded = data.current()
    assert loaded is not None
    return next(iter(loaded.accounts[0].queues))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return write_json(tmp_path / "d.json", version(1, 1))


def test_the_reloader_serves_a_changed_file_without_a_restart(path: Path) -> None:
    data = service.open_data(str(path), None, interval=0.05)
    app = service.create_app(data, access_log=False)
    assert names(call(app, headers=bearer(TOKEN_A))) == ["v1-0", "v1-1"]
    write_json(path, version(2, 1))
    eventually(lambda: names(call(app, headers=bearer(TOKEN_A))) == ["v2-0", "v2-1", "v2-2"])
    data.close()


@pytest.mark.parametrize("writable", [False, True], ids=["read-only", "writable"])
def test_a_version_replaced_is_not_kept(path: Path, writable: bool) -> None:
    """Once a reload or a write replaces it, no version of the file is held but the one in
    service (a server holds one store, not two: only a test double keeps its start)."""
    data = service.open_data(str(path), None, interval=3600, writable=writable)
    before = weakref.ref(cast(store.Store, data.current()))
    if writable:
        upsert(data, hashlib.sha256(TOKEN_A.encode()).digest(), "new")
    else:
        write_json(path, version(2, 1))
        assert data.refresh() is True
    gc.collect()
    assert before() is None
    data.close()


def test_a_bad_version_is_logged_once_and_the_last_good_one_served(path: Path, caplog: Any) -> None:
    data = service.open_data(str(path), None, interval=0.05)
    app = service.create_app(data, access_log=False)
    broken = version(2, 1)
    broken["accounts"][0]["queues"][1]["lag"] = "7"
    with caplog.at_level(logging.INFO, "qstash_lists"):
        write_json(path, broken)
        eventually(lambda: "keeping the last good version" in caplog.text)
        time.sleep(0.3)  # six more looks: nothing more is logged
        assert names(call(app, headers=bearer(TOKEN_A))) == ["v1-0", "v1-1"]
        data.close()
    assert [r.getMessage() for r in caplog.records] == [
        '%s: accounts[0].queues[1].lag: expected an integer from 0 to 2**53 - 1, got "7"' % path,
        "%s: keeping the last good version" % path,
    ]


def test_deleted_then_restored(path: Path, caplog: Any) -> None:
    data = service.open_data(str(path), None, interval=3600)
    os.remove(path)
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.refresh() is False
    assert served(data) == "v1-0"
    assert "%s: cannot read: No such file or directory" % path in caplog.text
    write_json(path, version(2, 1))
    assert data.refresh() is True
    assert served(data) == "v2-0"


def test_truncated_file_keeps_the_last_good_version(path: Path) -> None:
    data = service.open_data(str(path), None, interval=3600)
    text = json.dumps(version(2, 1))
    path.write_text(text[: len(text) // 2])
    assert data.refresh() is False
    assert served(data) == "v1-0"


def test_the_reloader_waits_for_its_interval_and_wake_makes_it_look_now(path: Path) -> None:
    data = service.open_data(str(path), None, interval=3600)
    write_json(path, version(2, 1))
    time.sleep(0.2)
    assert served(data) == "v1-0"  # not looked at yet
    data.wake()  # what SIGHUP does, from another thread
    eventually(lambda: served(data) == "v2-0")
    data.close()


def test_an_edit_that_keeps_inode_size_and_mtime_is_seen_by_its_ctime(path: Path) -> None:
    data = service.open_data(str(path), None, interval=3600)
    before = os.stat(path)
    path.write_text(path.read_text().replace("v1-", "v8-"))  # same size, same inode, new names...
    # ...and the same mtime, as cp -p leaves it.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert data.refresh() is True and served(data) == "v8-0"
    assert data.refresh() is False  # looked at, and unchanged since


def test_a_version_that_repeats_the_signature_judged_is_told_apart_by_its_content(
    path: Path, monkeypatch: Any
) -> None:
    """Timestamps too coarse to tell, and an inode number come back: a version judged less than
    RACY_SECONDS after it was written is read again, and told apart by its bytes (git's racy-clean
    rule); past that, stat alone may say unchanged, and a forced look (SIGHUP) reads it anyway."""
    data = service.open_data(str(path), None, interval=3600)
    monkeypatch.setattr(store, "_stat", lambda path: data._version.signature)
    write_json(path, version(8, 1))
    assert data.refresh() is True and served(data) == "v8-0"
    assert data.refresh() is False  # read again, the same bytes
    monkeypatch.setattr(store, "RACY_SECONDS", -1e9)  # judged long after it was written
    write_json(path, version(9, 1))
    assert data.refresh() is False and served(data) == "v8-0"
    assert data.refresh(force=True) is True and served(data) == "v9-0"


def test_a_read_torn_by_a_writer_is_read_again(path: Path, monkeypatch: Any) -> None:
    """The writer finishes its file while the reader is halfway: the descriptor's own fstat,
    before and after the read, says so, and the reader reads the whole new version."""
    data = service.open_data(str(path), None, interval=3600)
    text = json.dumps(version(2, 1)).encode()
    real = store.read_at_most
    calls: List[object] = []

    def torn(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
        calls.append(read)
        if len(calls) == 1:
            time.sleep(0.01)  # a coarse mtime clock must still see the write
            path.write_bytes(text)  # in place: the same inode, now complete
            return text[: len(text) // 2]  # what the reader got while it was half written
        return real(read, limit)

    monkeypatch.setattr(store, "read_at_most", torn)
    assert data.refresh(force=True) is True
    assert served(data) == "v2-0" and len(calls) == 2


def test_a_same_length_rewrite_during_the_read_is_read_again(path: Path, monkeypatch: Any) -> None:
    """The length cannot tell this one: the signature (the descriptor's fstat, before and after)
    does."""
    data = service.open_data(str(path), None, interval=3600)
    new = path.read_bytes().replace(b"v1-", b"v7-")
    real = store.read_at_most
    calls: List[object] = []

    def rewritten(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
        calls.append(read)
        raw = real(read, limit)
        if len(calls) == 1:
            time.sleep(0.01)  # a coarse ctime clock must still see the write
            with open(path, "r+b") as file:  # in place, the same length
                file.write(new)
        return raw

    monkeypatch.setattr(store, "read_at_most", rewritten)
    assert data.refresh(force=True) is True
    assert served(data) == "v7-0" and len(calls) == 2


def test_a_file_that_never_stops_changing_is_skipped_and_said(
    path: Path, monkeypatch: Any, caplog: Any
) -> None:
    data = service.open_data(str(path), None, interval=3600)
    versions = iter(range(2, 100))

    def always_torn(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
        time.sleep(0.01)
        write_json(path, version(next(versions), 1))
        return b"{"

    monkeypatch.setattr(store, "read_at_most", always_torn)
    with caplog.at_level(logging.WARNING, "qstash_lists"):
        assert data.refresh(force=True) is False
    assert served(data) == "v1-0"
    assert caplog.messages == [
        "%s: changed each time it was read (%d times); looking again later"
        % (path, store.READ_ATTEMPTS)
    ]
    monkeypatch.undo()
    assert data.refresh() is True  # the next look reads it again, though its signature was seen
    assert served(data).startswith("v%d-" % (1 + store.READ_ATTEMPTS))


def test_a_fifo_in_place_of_the_file_neither_hangs_nor_replaces_it(path: Path, caplog: Any) -> None:
    data = service.open_data(str(path), None, interval=3600)
    os.remove(path)
    os.mkfifo(path)  # nobody ever writes to it: opening it for reading would block for ever
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.refresh() is False
        assert data.refresh(force=True) is False
    assert served(data) == "v1-0"
    assert caplog.messages[:2] == [
        "%s: cannot read: not a regular file but a FIFO" % path,
        "%s: keeping the last good version" % path,
    ]
    os.remove(path)
    write_json(path, version(2, 1))
    assert data.refresh() is True and served(data) == "v2-0"  # a good file put back is picked up


def test_a_device_behind_a_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "data.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(store.DataError) as info:
        service.open_data(str(link), None)
    assert info.value.problems == [
        "%s: cannot read: not a regular file but a character device" % link
    ]


def test_a_file_over_the_size_limit_is_refused(path: Path, caplog: Any) -> None:
    data = service.open_data(str(path), None, interval=3600, max_size=2000)
    big = version(2, 40)
    write_json(path, big)
    size = path.stat().st_size
    assert size > 2000
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.refresh() is False
    assert served(data) == "v1-0"
    assert caplog.messages[0] == (
        "%s: cannot read: %d bytes, over the limit of 2000 bytes (--max-size, "
        "QSTASH_LISTS_MAX_SIZE)" % (path, size)
    )


def test_a_file_that_switches_form_gets_the_dev_token_only_in_the_one_account_form(
    path: Path,
) -> None:
    dev = service.DEV_TOKEN
    one = write_json(path, {"queues": [dict(Q_TEMPLATE, name="solo")]})
    data = service.open_data(str(one), None, interval=3600, fallback=dev)
    app = service.create_app(data, access_log=False)
    assert names(call(app, headers=bearer(dev))) == ["solo"]
    write_json(path, version(1, 1))  # now it lists accounts: the dev token is no account's
    assert data.refresh() is True
    assert call(app, headers=bearer(dev)).status == 401
    assert names(call(app, headers=bearer(TOKEN_A))) == ["v1-0", "v1-1"]
    write_json(path, {"queues": [dict(Q_TEMPLATE, name="solo-again")]})
    assert data.refresh() is True
    assert names(call(app, headers=bearer(dev))) == ["solo-again"]


def test_without_a_fallback_the_one_account_form_is_kept_out(path: Path, caplog: Any) -> None:
    data = service.open_data(str(path), None, interval=3600)
    write_json(path, {"queues": []})
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.refresh() is False
    assert served(data) == "v1-0"
    assert caplog.messages[0] == (
        "%s: holds a single account, and QSTASH_TOKEN is not set: set it to the token "
        "its clients send" % path
    )


def test_a_closed_data_file_stops_its_reloader(path: Path) -> None:
    data = service.open_data(str(path), None, interval=3600)
    thread = data._thread
    assert thread.is_alive()
    before = served(data)
    write_json(path, version(2, 1))
    data.close()  # wakes the reloader, which stops without another look
    assert not thread.is_alive() and served(data) == before


def test_readers_see_whole_snapshots_while_the_file_churns(tmp_path: Path) -> None:
    """Writers rewrite the file (valid, invalid, truncated, deleted and restored)
    while reader threads call the app: every answer is 200 with a complete array
    that is exactly one version of the file."""
    path = write_json(tmp_path / "d.json", version(0))
    data = service.open_data(str(path), None, interval=0.01)
    app = service.create_app(data, access_log=False)
    expected = {n: [q["name"] for q in version(n)["accounts"][0]["queues"]] for n in range(17)}
    stop = threading.Event()
    seen: Set[int] = set()
    errors: List[str] = []

    def reader() -> None:
        while not stop.is_set():
            response = call(app, headers=bearer(TOKEN_A))
            if response.status != 200:
                errors.append("status %d" % response.status)
                continue
            got = names(response)
            n = int(got[0].split("-")[0][1:])
            if got != expected[n]:
                errors.append("version %d is not whole" % n)
            seen.add(n)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        for n in range(1, 17):
            text = json.dumps(version(n))
            kind = n % 4
            if kind == 1:  # half written, then finished
                path.write_text(text[: len(text) // 3])
                path.write_text(text)
            elif kind == 2:  # deleted, then restored by an atomic rename
                os.remove(path)
                (tmp_path / "new.json").write_text(text)
                os.replace(tmp_path / "new.json", path)
            elif kind == 3:  # not JSON, then valid
                path.write_text("{not json")
                path.write_text(text)
            else:
                path.write_text(text)
            for _ in range(50):  # let the readers see it
                if n in seen:
                    break
                threading.Event().wait(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        data.close()
    assert errors == []
    assert len(seen) > 8, sorted(seen)
    eventually(lambda: served(data) == "v16-0")


def test_a_file_replaced_while_each_version_is_built_still_has_each_version_served(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A generator replaces the file faster than the reloader builds it: here, during every build.
    Each look must serve the complete version it read, not call it torn because the path moved on
    while it was being built."""
    path = write_json(tmp_path / "d.json", version(0, 2000))
    data = service.open_data(str(path), None, interval=3600)
    real, made = store.parse, [1]

    def parse(*args: Any) -> store.Store:
        built = real(*args)
        made[0] += 1
        # The generator moves on.
        os.replace(write_json(tmp_path / "new.json", version(made[0], 2000)), path)
        return built

    os.replace(write_json(tmp_path / "new.json", version(1, 2000)), path)
    monkeypatch.setattr(store, "parse", parse)
    seen = []
    for _ in range(3):
        assert data.refresh() is True
        seen.append(served(data))
    data.close()
    assert seen == ["v1-0", "v2-0", "v3-0"]


def test_a_file_read_in_several_chunks_is_whole(path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(store, "_READ_CHUNK", 100)
    raw = read_file(str(path)).raw
    assert raw == path.read_bytes() and len(raw) > 300


def test_a_file_that_grows_past_the_limit_while_read_is_refused(
    path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(store, "read_at_most", lambda read, limit: None)
    with pytest.raises(store.DataError) as info:
        read_file(str(path))
    assert info.value.problems == [
        "%s: cannot read: it grew while being read, over the limit of 64 MB "
        "(--max-size, QSTASH_LISTS_MAX_SIZE)" % path
    ]


def test_the_interval_must_be_positive(path: Path) -> None:
    with pytest.raises(ValueError):
        service.open_data(str(path), None, interval=0)


def test_a_fault_in_the_build_is_logged_and_the_last_good_version_kept(
    path: Path, caplog: Any, monkeypatch: Any
) -> None:
    builds: List[int] = []
    real = store.parse

    def build(*args: Any) -> store.Store:
        builds.append(1)
        if len(builds) > 1:
            raise RuntimeError("a bug")
        return real(*args)

    monkeypatch.setattr(store, "parse", build)
    data = store.DataFile(str(path), None, interval=3600)
    first = data.current()
    with caplog.at_level(logging.ERROR, "qstash_lists"):
        assert data.refresh(force=True) is False
    assert data.current() is first
    assert [(r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records] == [
        ("%s: cannot build a snapshot" % path, RuntimeError),
        ("%s: keeping the last good version" % path, None),
    ]


def test_a_data_file_nobody_holds_stops_its_reloader(path: Path) -> None:
    data = service.open_data(str(path), None, interval=0.01)
    thread = data._thread
    write_json(path, version(2, 1))
    # The reloader has looked.
    eventually(functools.partial(lambda source: served(source) == "v2-0", data))
    del data
    eventually(lambda: not thread.is_alive())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork: run it on Linux or macOS")
def test_a_forked_child_gets_a_reloader_of_its_own(path: Path) -> None:
    """gunicorn --preload loads the app in the master and forks workers: threads do not survive a
    fork."""
    data = service.open_data(str(path), None, interval=0.05)
    with warnings.catch_warnings():
        # 3.12+: forking a threaded process, as gunicorn does.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        ok = False
        try:
            write_json(path, version(2, 1))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not ok:
                ok = served(data) == "v2-0" and data._thread.is_alive()
                time.sleep(0.02)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    data.close()
    assert os.WEXITSTATUS(status) == 0


def test_a_file_changing_at_start_up_is_read_at_the_next_look(path: Path, monkeypatch: Any) -> None:
    def touched(read: Callable[[int], bytes], limit: int) -> bytes:
        os.utime(path)  # a writer is at it each time it is read
        return b"{"

    monkeypatch.setattr(store, "read_at_most", touched)
    data = service.open_data(str(path), None, interval=3600, required=False)
    assert data.current() is None
    monkeypatch.undo()
    assert data.refresh() is True and served(data) == "v1-0"  # no new signature needed


def test_a_file_that_appears_while_its_absence_is_reported_is_loaded_at_the_next_look(
    path: Path, monkeypatch: Any
) -> None:
    data = service.open_data(str(path), None, interval=3600)
    os.remove(path)
    real = store._open

    def open_then_write(name: str) -> Any:
        try:
            return real(name)  # fails: there is no file...
        finally:
            write_json(path, version(2, 1))  # ...and one appears before the failure is recorded

    monkeypatch.setattr(store, "_open", open_then_write)
    assert data.refresh() is False
    monkeypatch.undo()
    # Not by the racy rule: the file judged was none, so whatever appears is read.
    monkeypatch.setattr(store, "RACY_SECONDS", -1e9)
    assert data.refresh() is True and served(data) == "v2-0"


def test_a_read_shorter_than_fstat_says_is_read_again(path: Path, monkeypatch: Any) -> None:
    """Within one tick of a coarse clock the signature may not change: the length still tells."""
    data = service.open_data(str(path), None, interval=3600)
    write_json(path, version(2, 1))
    real = store.read_at_most
    calls: List[object] = []

    def short_once(read: Callable[[int], bytes], limit: int) -> Optional[bytes]:
        calls.append(read)
        raw = real(read, limit)
        return raw[:-1] if raw and len(calls) == 1 else raw

    monkeypatch.setattr(store, "read_at_most", short_once)
    assert data.refresh(force=True) is True and served(data) == "v2-0" and len(calls) == 2


class _Stat:
    """An fstat result that says the file is smaller than it is."""

    def __init__(self, real: os.stat_result, size: int) -> None:
        for name in dir(real):
            if name.startswith("st_"):
                setattr(self, name, getattr(real, name))
        self.st_size = size


def test_a_file_larger_than_fstat_said_is_cut_off_at_the_limit(
    path: Path, monkeypatch: Any
) -> None:
    size = path.stat().st_size
    # It passes the first check...
    monkeypatch.setattr(os, "fstat", lambda fd: _Stat(os.stat(fd), 10))
    with pytest.raises(store.DataError) as info:
        read_file(str(path), max_size=size - 1)  # ...and the read stops one byte past the limit
    assert info.value.problems == [
        "%s: cannot read: it grew while being read, over the limit of %d bytes "
        "(--max-size, QSTASH_LISTS_MAX_SIZE)" % (path, size - 1)
    ]


def test_a_file_of_exactly_the_limit_is_read_and_never_more_than_one_byte_past_it(
    path: Path, monkeypatch: Any
) -> None:
    size = path.stat().st_size
    assert read_file(str(path), max_size=size)[0] == path.read_bytes()
    with pytest.raises(store.DataError) as info:
        read_file(str(path), max_size=size - 1)
    assert info.value.problems[0].endswith(
        ": cannot read: %d bytes, over the limit of %d bytes (--max-size, "
        "QSTASH_LISTS_MAX_SIZE)" % (size, size - 1)
    )
    asked: List[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    monkeypatch.setattr(store, "_READ_CHUNK", 7)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert store.read_at_most(lambda n: os.read(fd, n), size) == path.read_bytes()
        os.lseek(fd, 0, os.SEEK_SET)
        del asked[:]
        assert store.read_at_most(lambda n: os.read(fd, n), 10) is None
    finally:
        os.close(fd)
    assert sum(asked) == 11  # the limit and one byte more, to tell "at most" from "over"


def _libc_fork() -> int:
    """fork(2) from C, as uWSGI forks its workers: no os.register_at_fork hook runs in the child."""
    return int(ctypes.PyDLL(None).fork())  # PyDLL: the GIL is held across the call, as in uWSGI


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork: run it on Linux or macOS")
@pytest.mark.parametrize("fork", [os.fork, _libc_fork], ids=["os.fork", "fork from C"])
def test_a_child_forked_in_the_middle_of_a_build_serves_the_file_as_it_is_now(
    path: Path, fork: Any, monkeypatch: Any
) -> None:
    """gunicorn --preload and uWSGI fork workers whenever they like: here, while the parent's
    reloader is building a new version.  The child must not keep the old snapshot as if it were
    the new file's: the fork marks it (Python's hook; from C, the server's own hook, which calls
    store.after_fork as make_app has uWSGI do), and its first call starts its reloader and looks."""
    parent = os.getpid()
    building, release = threading.Event(), threading.Event()

    real = store.parse

    def build(raw: bytes, *args: Any) -> store.Store:
        if os.getpid() == parent and b"v2-" in raw:
            building.set()
            release.wait(10)
        return real(raw, *args)

    monkeypatch.setattr(store, "parse", build)
    data = store.DataFile(str(path), None, interval=3600)
    write_json(path, version(2, 1))
    data.wake()
    assert building.wait(10)  # the parent's build is under way

    def reloaders() -> Set[threading.Thread]:  # this data file's (other tests' may still be alive)
        return {t for t in threading.enumerate() if t.name == "qstash-lists reloader: %s" % path}

    # A fork from C leaves them listed in the child, though they are not there.
    parents = reloaders()
    with warnings.catch_warnings():
        # 3.12+: forking a threaded process, as servers do.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = fork()
    if pid == 0:  # the child: report through the exit status only
        status = 1
        try:
            if fork is _libc_fork:
                store.after_fork()  # the server's post-fork hook
            if reloaders() - parents:  # none yet: a fork hook starts no thread
                os._exit(2)
            data.current()  # the child's first call: its own reloader, and a look now
            if len(reloaders() - parents) != 1:
                os._exit(3)
            deadline = time.monotonic() + 10
            while status and time.monotonic() < deadline:
                status = 0 if served(data) == "v2-0" else 1
                time.sleep(0.01)
        finally:
            os._exit(status)
    release.set()
    _, status = os.waitpid(pid, 0)
    data.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("make", ["socket", "unreadable"])
def test_a_fault_that_lasts_is_logged_when_it_starts_and_when_it_ends(
    path: Path, caplog: Any, make: str, monkeypatch: Any
) -> None:
    """A socket in place of the file, or a file this process may not open, for thirty looks: one
    report (its line and what is served), and one line when it is good again; a socket named as
    one."""
    import socket

    good = path.read_bytes()
    looks: List[int] = []
    real = store._stat

    def counted(path: str) -> Any:
        looks.append(1)
        return real(path)

    monkeypatch.setattr(store, "_stat", counted)
    data = service.open_data(str(path), None, interval=0.05)
    with caplog.at_level(logging.INFO, "qstash_lists"):
        path.unlink()
        if make == "socket":
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
        else:
            path.write_bytes(good)
            path.chmod(0)
            if os.access(path, os.R_OK):  # root reads anything: make it unreadable another way
                path.unlink()
                path.mkdir()
        eventually(lambda: len(looks) > 30)
        logged = [r.getMessage() for r in caplog.records]
        if make == "socket":
            server.close()
            path.unlink()
        elif path.is_dir():
            path.rmdir()
        else:
            path.chmod(0o644)
        path.write_bytes(good + b" ")
        eventually(lambda: any("good again" in r.getMessage() for r in caplog.records))
    data.close()
    assert len(logged) == 2, logged
    assert logged[1] == "%s: keeping the last good version" % path
    if make == "socket":
        assert logged[0] == "%s: cannot read: not a regular file but a socket" % path


def test_a_writable_processes_reloader_loads_anothers_writes_once_they_pause(path: Path) -> None:
    """A writable process loads another's write when a request needs it (tests/test_writes.py), and
    its reloader does once the file is still: its health is not stale for ever after a burst of
    writes it was not asked about."""
    write_json(path, version(1))
    writer = store.DataFile(str(path), None, 3600, writable=True)
    reader = store.DataFile(str(path), None, 0.05, writable=True)
    assert upsert(writer, hashlib.sha256(TOKEN_A.encode()).digest(), "new", 2) == "queue created"
    # The version in service is the one on disk.
    eventually(lambda: reader.status().failed_at is None)
    loaded = reader.current()  # loads nothing now: it is in service
    assert loaded is not None and "new" in loaded.accounts[0].queues
    writer.close()
    reader.close()


def test_the_health_says_stale_between_a_change_and_the_next_look(path: Path) -> None:
    """What /healthz's "stale" reads: the file on disk is not the version in service (a version
    renamed over it, not yet looked at), and no longer once it is."""
    write_json(path, version(1))
    data = store.DataFile(str(path), None, 3600)
    assert data.status().failed_at is None
    write_json(path.with_suffix(".new"), version(2))
    os.replace(path.with_suffix(".new"), path)
    assert data.status().failed_at is not None
    assert data.refresh() is True and data.status().failed_at is None
    data.close()
