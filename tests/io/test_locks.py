"""One writer per output file: flock on a lock file beside it, refused with the holder's PID."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mdband.errors import MdbandError
from mdband.io.locks import OutputLock, OutputLockedError, OutputLocks, lock_path

_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{os.getpid()} {os.uname().nodename}\\n".encode())
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_second_writer_is_refused_with_the_pid(tmp_path):
    out = tmp_path / "t.h5"
    with OutputLock(out, "trajectory") as first:
        assert first.held and lock_path(out).read_text().split()[0] == str(os.getpid())
        with pytest.raises(OutputLockedError, match=rf"trajectory .*t.h5 .*PID {os.getpid()}\)"):
            OutputLock(out, "trajectory").acquire()
    assert not lock_path(out).exists()  # released: the lock file is gone
    OutputLock(out).acquire().release()  # and the path can be locked again


def test_lock_of_a_killed_process_is_free(tmp_path):
    out = tmp_path / "t.h5"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lock_path(out))], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(OutputLockedError, match=f"PID {holder.pid}"):
            OutputLock(out).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_path(out).exists()  # a stale file, but the kernel dropped the lock
    with OutputLock(out):
        assert lock_path(out).read_text().split()[0] == str(os.getpid())


def test_several_outputs_all_or_nothing(tmp_path):
    taken = OutputLock(tmp_path / "c.ckpt").acquire()
    try:
        with pytest.raises(OutputLockedError, match="c.ckpt"):
            OutputLocks.acquire(
                {"trajectory": tmp_path / "t.h5", "checkpoint": tmp_path / "c.ckpt"}
            )
        assert not lock_path(tmp_path / "t.h5").exists()  # the first one was given back
    finally:
        taken.release()
    with OutputLocks.acquire({"trajectory": tmp_path / "t.h5", "log": tmp_path / "r.log"}) as held:
        assert len(held.locks) == 2
    assert sorted(os.listdir(tmp_path)) == []


def test_unwritable_directory(tmp_path):
    missing = tmp_path / "no" / "t.h5"
    with pytest.raises(MdbandError, match="cannot write trajectory .*No such file"):
        OutputLock(missing, "trajectory").acquire()
