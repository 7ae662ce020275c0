"""A module that starts a thread when imported: the fork server must refuse to fork from a process that imported
it (tests/unit/local/test_forkserver.py)."""

import threading

_stop = threading.Event()
threading.Thread(target=_stop.wait, name="started-by-import", daemon=True).start()
