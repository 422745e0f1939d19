"""The writer probed as an attacker would: each case here broke it before its rebuild (a 200
that left a file that is not JSON, a broken file taken as good, one file copied into another,
SIGHUP bursts that hung the server, one account's refusal failing another's write, a read that
missed a write answered, waiting writes that starved the reads, a retry under the lock of a file
replaced)."""

import fcntl
import hashlib
import http.client
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, List, Optional, Tuple, cast

import pytest
from helpers import (
    ROOT,
    TOKEN_A,
    TOKEN_B,
    TOKEN_C,
    Server,
    accounts_document,
    bearer,
    eventually,
    free_port,
    lock_awaited,
    serving,
    started,
    upsert,
    write_json,
)

import app as service
import store

DIGEST_A = hashlib.sha256(TOKEN_A.encode()).digest()
DIGEST_B = hashlib.sha256(TOKEN_B.encode()).digest()
DIGEST_C = hashlib.sha256(TOKEN_C.encode()).digest()


def ask(
    server: Server, method: str, path: str, token: str = TOKEN_A, body: Any = None
) -> Tuple[int, Any]:
    """One request to a running server: its status and its JSON (None for an empty body)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Authorization": "Bearer " + token})
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def queue_names(server: Server, token: str = TOKEN_A) -> List[str]:
    status, listed = ask(server, "GET", "/v2/queues", token)
    assert status == 200, listed
    return [queue["name"] for queue in listed]


def loads(path: Path) -> store.Store:
    """The file as a fresh process loads it (a whole parse): DataError if it does not."""
    return store.load(str(path), None)


# ---- 1, 2. Another process's file: reused exactly, or parsed whole -------------------------------
def test_a_hand_written_last_account_then_a_write_to_another_leaves_a_file_that_loads(
    tmp_path: Path,
) -> None:
    """The last account written by hand (its signingKeys last, no final newline), loaded by two
    writable processes; a write to another account through one: the file still loads, and both
    serve the write."""
    path = write_json(tmp_path / "data.json", accounts_document())
    with (
        serving(path, "--writable", "--quiet") as one,
        serving(path, "--writable", "--quiet") as two,
    ):
        assert ask(one, "POST", "/v2/queues", body={"queueName": "first"})[0] == 200  # its layout
        raw = path.read_bytes()
        last = {
            "tokenSha256": hashlib.sha256(TOKEN_C.encode()).hexdigest(),
            "queues": [],
            "signingKeys": {"current": "sig_c", "next": "sig_n"},
        }
        at = raw.rindex(b",\n{") + 2
        edited = raw[:at] + json.dumps(last).encode()
        path.write_bytes(edited + b"\n]}")
        assert ask(one, "GET", "/v2/keys", TOKEN_C)[1] == {"current": "sig_c", "next": "sig_n"}
        assert ask(two, "GET", "/v2/keys", TOKEN_C)[1] == {"current": "sig_c", "next": "sig_n"}
        assert ask(one, "POST", "/v2/queues", body={"queueName": "second"})[0] == 200
        assert [queue.name for queue in loads(path).accounts[0].queues.values()] == [
            "emails",
            "first",
            "second",
        ]
        assert queue_names(two) == ["emails", "first", "second"]
        assert loads(path).accounts[2].signing_keys == ("sig_c", "sig_n")


def test_a_stray_byte_before_an_unchanged_account_is_refused_and_never_written_over(
    tmp_path: Path,
) -> None:
    """A ``1`` typed before an account the process has, byte for byte: not JSON, so the process
    keeps the last good version, logs the fault, and a write answers 409 leaving the file as
    edited."""
    path = write_json(tmp_path / "data.json", accounts_document())
    with serving(path, "--writable") as one:  # not --quiet: a reload would say so
        assert ask(one, "POST", "/v2/queues", body={"queueName": "first"})[0] == 200
        raw = path.read_bytes()
        at = raw.index(b",\n{") + 2
        path.write_bytes(raw[:at] + b"1" + raw[at:])
        with pytest.raises(store.DataError):
            loads(path)
        assert ask(one, "POST", "/v2/queues", token=TOKEN_B, body={"queueName": "x"})[0] == 409
        assert queue_names(one) == ["emails", "first"]
        one.err.wait_for("keeping the last good version")
        assert path.read_bytes() == raw[:at] + b"1" + raw[at:]
        assert one.err.count("reloaded") == 0


# ---- 3. The lock on what is renamed --------------------------------------------------------------
def two_files_and_a_link(tmp_path: Path) -> Tuple[Path, Path, Path, store.DataFile]:
    """a.json and b.json (whose first account has no queue), data.json a link to a.json, and a
    writable DataFile on the link."""
    a = write_json(tmp_path / "a.json", accounts_document())
    other = accounts_document()
    other["accounts"][0]["queues"] = []
    b = write_json(tmp_path / "b.json", other)
    link = tmp_path / "data.json"
    link.symlink_to("a.json")
    return a, b, link, service.open_data(str(link), None, interval=3600, writable=True)


def re_point_when_opened(monkeypatch: Any, target: Path, link: Path, new: str) -> List[str]:
    """As the writer opens ``target`` to lock it, re-point ``link`` to ``new`` (as ``ln -sfn``
    does: a new link renamed over it), once; the list says whether it was done."""
    real_open, flipped = store._open, cast(List[str], [])

    def open_then_re_pointed(path: str) -> int:
        fd = real_open(path)
        if path == str(target) and not flipped:
            flipped.append(path)
            (link.parent / "new-link").symlink_to(new)
            os.replace(link.parent / "new-link", link)
        return fd

    monkeypatch.setattr(store, "_open", open_then_re_pointed)
    return flipped


def test_a_symlink_re_pointed_while_a_write_takes_the_lock_writes_the_new_target_alone(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """data.json is a link to a.json; as the writer opens a.json to lock it, the link is
    re-pointed to b.json (ln -sfn): the write lands in b.json, built on b.json, and a.json is
    left as it was."""
    a, b, link, data = two_files_and_a_link(tmp_path)
    before_a = a.read_bytes()
    flipped = re_point_when_opened(monkeypatch, a, link, "b.json")
    assert upsert(data, DIGEST_A, "w", None, None) == ("queue created")
    assert flipped and a.read_bytes() == before_a
    assert [q.name for q in store.load(str(b), None).accounts[0].queues.values()] == ["w"]
    data.close()


def test_a_symlink_re_pointed_while_a_write_waits_for_the_lock_writes_the_new_target(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The probe's case: data.json links to a.json; a write waits for another writer's lock on
    a.json; meanwhile the link is re-pointed to b.json (ln -sfn), then the lock let go: the write
    lands in b.json, built on b.json, and a.json is left as it was."""
    monkeypatch.setattr(store, "LOCK_TIMEOUT", 600)  # it waits for the test, however slow
    a, b, link, data = two_files_and_a_link(tmp_path)
    before_a, answers = a.read_bytes(), cast(List[str], [])
    awaited = lock_awaited(monkeypatch)
    holder = os.open(str(a), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another writer, at work on a.json
    try:
        writer = threading.Thread(
            target=lambda: answers.append(upsert(data, DIGEST_A, "w", None, None)),
            daemon=True,
        )
        writer.start()
        eventually(awaited.is_set)  # it waits for the lock on a.json
        (tmp_path / "new-link").symlink_to("b.json")
        os.replace(tmp_path / "new-link", link)
    finally:
        os.close(holder)
    writer.join(timeout=60)
    assert answers == ["queue created"] and a.read_bytes() == before_a
    assert [q.name for q in store.load(str(b), None).accounts[0].queues.values()] == ["w"]
    data.close()


def test_a_symlink_re_pointed_to_another_name_of_the_same_file_writes_where_it_leads(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """data.json is a link to a.json, re-pointed (as the writer locks a.json) to c.json, another
    name (a hard link) of the very same file: the version lands under the name the path leads to
    when it is answered, so that data.json shows the write."""
    a = write_json(tmp_path / "a.json", accounts_document())
    os.link(a, tmp_path / "c.json")
    link = tmp_path / "data.json"
    link.symlink_to("a.json")
    data = service.open_data(str(link), None, interval=3600, writable=True)
    flipped = re_point_when_opened(monkeypatch, a, link, "c.json")
    assert upsert(data, DIGEST_A, "w", None, None) == ("queue created")
    assert flipped and list(store.load(str(link), None).accounts[0].queues) == ["emails", "w"]
    data.close()


def test_a_version_renamed_over_the_file_during_a_write_is_written_under_its_own_lock(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A hand edit renamed over the file while the write works: the write is made again on it,
    under the lock of that very file (another process's writer cannot write at the same time)."""
    path = write_json(tmp_path / "data.json", accounts_document())
    data = service.open_data(str(path), None, interval=3600, writable=True)
    real_replace, renames, edited = os.replace, cast(List[str], []), cast(List[str], [])

    def replace(source: Any, target: Any) -> None:
        if not str(source).endswith(".qstash-lists-tmp"):  # the editor's
            return real_replace(source, target)
        probe = os.open(str(path), os.O_RDONLY)
        try:  # another process's writer, on the file the path leads to now
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = "not locked"
        except BlockingIOError:
            locked = "locked"
        finally:
            os.close(probe)
        real_replace(source, target)  # the rename made (the first try finds the edit, lets go)
        renames.append(locked)

    def edited_meanwhile(account: store.Account, now: int) -> Tuple[store.Account, str]:
        made = store.upsert_queue(account, now, "w", None, None)
        if not edited:  # the first try: an editor saves by renaming
            edited.append("by hand")
            document = accounts_document()
            document["accounts"][1]["queues"] = []
            write_json(tmp_path / "edit.json", document)
            os.replace(tmp_path / "edit.json", path)
        return made

    monkeypatch.setattr(os, "replace", replace)
    assert data.update(DIGEST_A, edited_meanwhile) == "queue created"
    assert renames == ["locked"]
    written = store.load(str(path), None)
    assert list(written.accounts[0].queues) == ["emails", "w"] and not written.accounts[1].queues
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]  # the first try's version gone
    data.close()


# ---- 4. Signals take no lock ---------------------------------------------------------------------
def sighup_bursts(pid: int, bursts: int = 40, each: int = 5) -> None:
    for _ in range(bursts):
        for _ in range(each):
            os.kill(pid, signal.SIGHUP)


def test_the_sighup_handler_takes_no_lock(data_path: Path, monkeypatch: Any) -> None:
    """What SIGHUP runs acquires no lock (an Event's set() does): a second signal that comes while
    the first handler holds one, in the same thread, would wait for it forever."""
    data = service.open_data(str(data_path), None, interval=3600)
    taken: List[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:  # a lock's method called
        if event == "c_call" and arg.__name__ in ("acquire", "__enter__"):
            taken.append(repr(arg))

    class Noted:  # a lock made during the call, taken as a with statement takes it
        def __init__(self, *args: Any) -> None:
            taken.append("a lock made")

        def __enter__(self) -> None:
            taken.append("a lock taken")

        def __exit__(self, *args: Any) -> None:
            pass

        acquire = release = __enter__

    monkeypatch.setattr(threading, "Lock", Noted)
    monkeypatch.setattr(threading, "RLock", Noted)
    sys.setprofile(profile)
    try:
        service._wake_all(signal.SIGHUP, None)
    finally:
        sys.setprofile(None)
        monkeypatch.undo()
    assert taken == []
    data.close()


def test_sighup_bursts_never_hang_python_app_py_and_sigterm_still_stops_it(
    data_path: Path,
) -> None:
    """200 SIGHUPs in bursts of 5 (log rotation, a supervisor): it answers after each burst, and
    SIGTERM stops it, exit status 0 (a handler that took a lock hung it for good)."""
    with serving(data_path, "--quiet") as server:
        for _ in range(40):
            sighup_bursts(server.proc.pid, bursts=1)
            assert queue_names(server) == ["emails"]
        status, _, err = server.stop()
    assert status == 0 and "Traceback" not in err


def test_sighup_bursts_never_hang_waitress_serve(data_path: Path) -> None:
    """The same under waitress-serve, where make_app sets the SIGHUP handler."""
    from test_hostile import deploy_command, wait_until_answered

    port = free_port()
    env = {"QSTASH_LISTS_DATA": str(data_path), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "waitress"] + deploy_command("waitress-serve", port)[1:]
    with started(command, env, cwd=str(data_path.parent)) as proc:
        wait_until_answered(port)
        for _ in range(40):
            sighup_bursts(proc.pid, bursts=1)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/v2/queues", headers={"Authorization": "Bearer " + TOKEN_A})
            assert conn.getresponse().status == 200
            conn.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


# ---- 5. Every refusal is the change's own --------------------------------------------------------
def batch(data: store.DataFile, *writes: Tuple[bytes, str]) -> List[Any]:
    """Make upserts of the queues ``(account's digest, name)`` one after another, as a burst of
    writes is made; return each one's outcome (what it did, or its error)."""
    outcomes: List[Any] = []
    for digest, name in writes:
        try:
            outcomes.append(upsert(data, digest, name))
        except store.DataError as exc:
            outcomes.append(type(exc))
    return outcomes


def test_a_change_over_its_accounts_share_is_refused_alone(data_path: Path) -> None:
    """Account A is near its share of --max-size: its write is refused (507), and B's, made in the
    same version, is written."""
    loaded = store.load(str(data_path), None)
    share = len(loaded.accounts[0].lines) + 40  # A cannot take one more queue
    data = service.open_data(str(data_path), None, 3600, writable=True, max_size=share * 3)
    assert batch(data, (DIGEST_A, "more"), (DIGEST_B, "more")) == [
        store.TooLarge,
        "queue created",
    ]
    assert [list(account.queues) for account in store.load(str(data_path), None).accounts] == [
        ["emails"],
        ["reports", "more"],
        [],
    ]
    data.close()


def test_the_change_that_takes_the_file_over_max_size_is_refused_alone(data_path: Path) -> None:
    """Two changes that each fit, in two small accounts (each within its share), not both: the
    first is written, the second refused (507)."""
    before = store.load(str(data_path), None).lines  # as the writer writes it
    data_path.write_bytes(before)
    alone = service.open_data(str(data_path), None, 3600, writable=True)
    assert batch(alone, (DIGEST_B, "more")) == ["queue created"]
    alone.close()
    size = data_path.stat().st_size  # the file with the first change alone: the limit
    data_path.write_bytes(before)
    data = service.open_data(str(data_path), None, 3600, writable=True, max_size=size)
    assert batch(data, (DIGEST_B, "more"), (DIGEST_C, "more")) == [
        "queue created",
        store.TooLarge,
    ]
    assert data_path.stat().st_size == size
    data.close()


# ---- 6. Read-your-writes at any size -------------------------------------------------------------
def test_a_read_that_a_rename_overtakes_serves_the_version_it_read(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Each time a second process reads the file, a write renames another version over it: that
    is not a writer at work (the version read is whole): it serves the write answered before it
    looked, never the version before."""
    path = write_json(tmp_path / "data.json", accounts_document())
    writer = service.open_data(str(path), None, interval=3600, writable=True)
    reader = service.open_data(str(path), None, interval=3600, writable=True)
    assert upsert(writer, DIGEST_A, "first", 1, None)
    real, reading, renamed = store.read_at_most, threading.local(), cast(List[str], [])

    def overtaken(read: Any, limit: int) -> Optional[bytes]:
        found = real(read, limit)
        if getattr(reading, "now", False):
            reading.now = False  # the writer's own read is not the reader's
            name = "during-%d" % len(renamed)
            renamed.append(upsert(writer, DIGEST_B, name, 1, None))
            reading.now = True
        return found

    monkeypatch.setattr(store, "read_at_most", overtaken)
    reading.now = True
    seen = reader.current()
    reading.now = False
    assert renamed and seen is not None and "first" in seen.accounts[0].queues
    writer.close()
    reader.close()


def test_each_write_answered_through_one_process_is_read_back_through_another(
    tmp_path: Path,
) -> None:
    """Six clients write through one process on a larger file; each 200, read back at once
    through the other process, has the value written."""
    document = accounts_document()
    document["accounts"][1]["queues"] = [
        {"createdAt": 1, "updatedAt": 1, "name": "b%d" % i, "parallelism": 1, "lag": 0}
        for i in range(5000)
    ]
    path = write_json(tmp_path / "data.json", document)
    stale: List[Tuple[str, Any]] = []
    with (
        serving(path, "--writable", "--quiet") as one,
        serving(path, "--writable", "--quiet") as two,
    ):

        def client(i: int) -> None:
            for round_ in range(8):
                name, parallelism = "c%d" % i, round_ + 1
                body = {"queueName": name, "parallelism": parallelism}
                assert ask(one, "POST", "/v2/queues", body=body)[0] == 200
                status, found = ask(two, "GET", "/v2/queues/" + name)
                if status != 200 or found["parallelism"] != parallelism:
                    stale.append((name, found))

        clients = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
    assert stale == []


# ---- 7. Waiting writes never starve reads --------------------------------------------------------
def test_while_another_process_holds_the_lock_waiting_writes_leave_threads_for_reads(
    data_path: Path, monkeypatch: Any
) -> None:
    """Another process holds the lock (for as long as this test likes) and 16 clients write: one
    waits, the rest are 503 with Retry-After at once, and a read of another account is answered
    while the lock is still held; once it is let go, the waiting write is made."""
    monkeypatch.setattr(store, "LOCK_TIMEOUT", 600)  # the writes would wait for the test
    monkeypatch.setattr(store, "LOCK_STUCK", 0)  # the first write's turn is stuck at once
    awaited = lock_awaited(monkeypatch)
    data = service.open_data(str(data_path), None, 3600, writable=True)
    with service.serving(service.create_app(data, access_log=False), threads=4) as url:
        local = Server.__new__(Server)
        local.host, local.port = "127.0.0.1", int(url.rsplit(":", 1)[1])
        statuses: List[int] = []

        def write(i: int) -> None:
            statuses.append(ask(local, "POST", "/v2/queues", body={"queueName": "w%d" % i})[0])

        holder = os.open(str(data_path), os.O_RDONLY)
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, at work
        try:
            first = threading.Thread(target=write, args=(0,), daemon=True)
            first.start()
            eventually(awaited.is_set)
            others = [threading.Thread(target=write, args=(i,), daemon=True) for i in range(1, 16)]
            for thread in others:
                thread.start()
            eventually(lambda: len(statuses) == 15)  # all but the one that waits: 503 at once
            assert statuses == [503] * 15
            assert queue_names(local, TOKEN_B) == ["reports"]  # answered while the lock is held
        finally:
            os.close(holder)  # lets go of the lock
        for thread in [first] + others:
            thread.join()
        assert sorted(statuses) == [200] + [503] * 15
    data.close()


@pytest.mark.parametrize("threads", [2, 4, 8])
def test_a_read_never_waits_behind_writes_that_cannot_go(
    data_path: Path, monkeypatch: Any, threads: int
) -> None:
    """Another process keeps the lock; sixteen clients write account A, each again as soon as it is
    answered: every read of account B is answered while the lock is held (the writes would wait
    for the test: a read that waited behind one would never be answered), each write that cannot
    go gets its 503 with Retry-After, and once the lock is let go the writes are made."""
    monkeypatch.setattr(store, "LOCK_TIMEOUT", 600)  # the writes would wait for the test
    data = service.open_data(str(data_path), None, 3600, writable=True)
    stop, refused, made = threading.Event(), cast(List[str], []), cast(List[int], [])
    with service.serving(service.create_app(data, access_log=False), threads=threads) as url:
        local = Server.__new__(Server)
        local.host, local.port = "127.0.0.1", int(url.rsplit(":", 1)[1])

        def writer(i: int) -> None:
            conn = http.client.HTTPConnection(local.host, local.port, timeout=600)
            while not stop.is_set():
                conn.request(
                    "POST", "/v2/queues", json.dumps({"queueName": "w%d" % i}), bearer(TOKEN_A)
                )
                response = conn.getresponse()
                response.read()
                if response.status == 503:
                    refused.append(response.getheader("Retry-After") or "")
                else:
                    made.append(response.status)
            conn.close()

        def write_once() -> int:
            return ask(local, "POST", "/v2/queues", body={"queueName": "burst"})[0]

        holder = os.open(str(data_path), os.O_RDONLY)
        fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, stuck
        writers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(16)]
        try:
            for thread in writers:
                thread.start()
            eventually(lambda: len(refused) >= 100)
            for _ in range(20):
                assert queue_names(local, TOKEN_B) == ["reports"]
            assert set(refused) == {"1"} and made == []
        finally:
            os.close(holder)  # lets go of the lock
        eventually(lambda: len(made) >= 16)
        stop.set()
        for thread in writers:
            thread.join()
        # The lock had again: writes that come together wait for each other, none refused.
        refused.clear()
        burst = [threading.Thread(target=lambda: made.append(write_once())) for _ in range(8)]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join()
    assert set(made) == {200} and refused == []
    data.close()


def test_after_a_write_that_could_not_have_the_lock_the_writes_that_wait_are_refused_at_once(
    data_path: Path, monkeypatch: Any
) -> None:
    """Another process keeps the lock: a write waits out its deadline (Busy); the next takes its
    turn and waits for the lock again, and a write behind it is refused at once, however young
    that turn (it would otherwise wait for the test); once the lock is had, writes wait for each
    other again."""
    monkeypatch.setattr(store, "LOCK_STUCK", 600)  # only the Busy write makes the others refused
    data = service.open_data(str(data_path), None, 3600, writable=True)
    answers: List[Any] = []

    def write(name: str) -> None:
        try:
            answers.append(upsert(data, DIGEST_A, name))
        except store.Busy:
            answers.append("busy")

    holder = os.open(str(data_path), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, stuck
    try:
        monkeypatch.setattr(store, "LOCK_TIMEOUT", 0.05)
        write("w0")
        assert answers == ["busy"]
        monkeypatch.setattr(store, "LOCK_TIMEOUT", 600)  # the next writes would wait for the test
        awaited = lock_awaited(monkeypatch)
        threads = [threading.Thread(target=write, args=("w1",), daemon=True)]
        threads[0].start()
        eventually(awaited.is_set)  # it has its turn, and waits for the lock
        threads.append(threading.Thread(target=write, args=("w2",), daemon=True))
        threads[1].start()
        eventually(lambda: len(answers) == 2)
        assert answers == ["busy", "busy"]
    finally:
        os.close(holder)  # lets go of the lock
    for thread in threads:
        thread.join()
    assert answers == ["busy", "busy", "queue created"]
    awaited.clear()
    waiting = threading.Event()

    class Turns(threading.Condition):
        def wait(self, timeout: Optional[float] = None) -> bool:
            waiting.set()
            return super().wait(timeout)

    data._turns._changed = Turns()
    holder = os.open(str(data_path), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # held again
    try:
        threads = [threading.Thread(target=write, args=("w3",), daemon=True)]
        threads[0].start()
        eventually(awaited.is_set)
        threads.append(threading.Thread(target=write, args=("w4",), daemon=True))
        threads[1].start()
        eventually(waiting.is_set)  # it waits behind w3's young turn, not refused
    finally:
        os.close(holder)
    for thread in threads:
        thread.join()
    assert answers[3:] == ["queue created", "queue created"]
    data.close()
