"""Started by Python's ``site`` module in every process of a gpuscope session (via PYTHONPATH).

It starts the gpuscope agent before any user code runs, then hands over to the ``sitecustomize``
that the environment would have used without gpuscope, if there is one.
"""

import os
import sys


def _say(message: str) -> None:
    if sys.stderr is not None:  # None: the program was started with its stderr closed
        try:
            sys.stderr.write(message)
        except (OSError, ValueError):
            pass


def _start_agent() -> None:
    try:
        from gpuscope.capture.process import agent
    except Exception as exc:  # noqa: BLE001  (never break the user's program)
        _say(f"gpuscope: the profiling agent could not be loaded: {exc}\n")
        return
    try:
        agent.start_from_env()
    except Exception as exc:  # noqa: BLE001
        _say(f"gpuscope: the profiling agent failed to start: {type(exc).__name__}: {exc}\n")


def _start_trial() -> None:
    """A run of ``gpuscope try``: the fix's patches (capture/trial.py), after the agent."""
    if not os.environ.get("GPUSCOPE_TRY"):
        return
    try:
        from gpuscope.capture import trial as inprocess

        inprocess.start_from_env()
    except Exception as exc:  # noqa: BLE001
        _say(f"gpuscope: the fix could not be installed: {type(exc).__name__}: {exc}\n")


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        del sys.modules["sitecustomize"]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ModuleNotFoundError as exc:
            if exc.name != "sitecustomize":
                raise
            if me is not None:
                sys.modules["sitecustomize"] = me
    finally:
        sys.path[:] = [p for p in saved if os.path.abspath(p or ".") != here]


_start_agent()
_start_trial()
_chain_next_sitecustomize()
