"""docs/api.md is what the code says: ``python docs/make_api.py`` writes it from the
package's ``__all__`` lists, signatures and docstrings, so a public name added, renamed or
given other arguments fails here until the page is rewritten."""

import importlib.util
from pathlib import Path

import minidtr as md

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
make_api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_api)


def test_the_api_page_is_what_the_code_says():
    written = (ROOT / "docs" / "api.md").read_text()
    assert written == make_api.page(), "docs/api.md is stale: run python docs/make_api.py"


def test_every_public_name_is_on_the_page():
    page = make_api.page()
    for module, prefix in [(md.nn, "md.nn."), (md.optim, "md.optim."), (md.sim, "md.sim."),
                           (md.testing, "md.testing.")]:  # fmt: skip
        for name in module.__all__:
            if name != "init":
                assert f"`{prefix}{name}" in page, name
    for name in md.ops.__all__:
        assert f"md.{name}" in page or f"md.ops.{name}" in page or name == "Tensor", name
