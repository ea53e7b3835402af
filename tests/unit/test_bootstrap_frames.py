"""Bootstrap frames (runpy, `<module>`, threading's and multiprocessing's start-up, server run
loops) never lead a "hottest" list or a finding's sites: they are on nearly every stack."""

from __future__ import annotations

from diagnose.checks.base import Site, leading_sites
from diagnose.model.bootstrap import is_bootstrap
from diagnose.samples.profile import Frame

LIB = "/usr/lib/python3.11"


def py(function: str, file: str) -> Frame:
    return Frame(function, file, 1, False)


def test_interpreter_thread_process_and_server_start_up_frames_are_bootstrap():
    for frame in (py("_run_module_as_main", f"{LIB}/runpy.py"), py("<module>", "/srv/app.py"),
                  py("Thread._bootstrap_inner", f"{LIB}/threading.py"),
                  py("BaseProcess._bootstrap", f"{LIB}/multiprocessing/process.py"),
                  py("Arbiter.run", "/venv/lib/python3.11/site-packages/gunicorn/arbiter.py"),
                  py("Application.run", "/venv/lib/python3.11/site-packages/gunicorn/app/base.py"),
                  py("Server.serve", "/venv/lib/python3.11/site-packages/uvicorn/server.py"),
                  py("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py")):
        assert is_bootstrap(frame), frame


def test_application_functions_and_native_frames_are_not_bootstrap():
    for frame in (py("featurize", "/srv/app.py"), py("run", "/srv/app.py"),
                  py("Model.predict", "/srv/model.py"),
                  Frame("<module>", "/usr/lib/libpython3.11.so", 0, True)):
        assert not is_bootstrap(frame), frame


def test_a_findings_sites_lead_with_application_code_unless_only_bootstrap_is_left():
    sites = [Site("_run_module_as_main", f"{LIB}/runpy.py", 198, 0.95),
             Site("<module>", "/srv/app.py", 3, 0.95), Site("featurize", "/srv/app.py", 40, 0.89)]
    assert [s.function for s in leading_sites(sites)] == ["featurize"]
    only = sites[:2]
    assert leading_sites(only) == tuple(only)
