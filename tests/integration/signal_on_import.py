"""A test-only plugin that signals its own process while it is imported.

Plugins are imported while the worker is built, a synchronous step after ``run_worker``
installed the loop's handlers but before the loop runs them: the signal lands,
deterministically, in the part of start-up that used to die of Python's default SIGTERM
action (exit 143). Signals before the loop exists are ``catch_stop_signals_early``'s
(tests/unit/test_signals.py). ``SELF_SIGNAL`` names the signal (default SIGTERM).
"""

from __future__ import annotations

import os
import signal

os.kill(os.getpid(), getattr(signal, os.environ.get("SELF_SIGNAL", "SIGTERM")))
