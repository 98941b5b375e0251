"""A store with torch.distributed's store methods, kept in files of a folder shared by
the rank processes: what `lowcon.from_store` is tested with in CI, where torch is absent.
`add` holds an fcntl lock; `set` writes a temporary file and renames it (atomic)."""

import fcntl
import os
import time
import urllib.parse


class FileStore:
    def __init__(self, folder):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def _path(self, key):
        return os.path.join(self.folder, urllib.parse.quote(key, safe=""))

    def set(self, key, value):
        if isinstance(value, str):
            value = value.encode()
        tmp = self._path(key) + f".tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(value)
        os.rename(tmp, self._path(key))

    def get(self, key):
        with open(self._path(key), "rb") as f:
            return f.read()

    def wait(self, keys, timeout):
        end = time.monotonic() + timeout.total_seconds()
        while not all(os.path.exists(self._path(k)) for k in keys):
            if time.monotonic() > end:
                raise RuntimeError(f"Wait timeout for keys {keys}")
            time.sleep(0.002)

    def add(self, key, delta):
        with open(os.path.join(self.folder, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                v = int(self.get(key)) if os.path.exists(self._path(key)) else 0
            finally:
                pass
            v += delta
            self.set(key, str(v).encode())
            return v
