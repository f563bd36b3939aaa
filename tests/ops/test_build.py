"""The build lists its C sources by name (meson.build): the list and the tree must agree, or a
new file would silently not be compiled (or a removed one break the build)."""
import re

from servers import TESTS_DIR

ROOT = TESTS_DIR.parent


def test_meson_lists_every_c_source():
    text = (ROOT / "meson.build").read_text()
    block = re.search(r"core_sources = files\((.*?)\)", text, re.S).group(1)
    listed = re.findall(r"'([^']+\.c)'", block)
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.c"))
    assert len(listed) == len(set(listed)), "a source is listed twice"
    assert sorted(listed) == on_disk


def test_installed_package_has_every_module():
    import m0serve

    installed = {p.name for p in __import__("pathlib").Path(m0serve.__file__).parent.glob("*.py")}
    in_tree = {p.name for p in (ROOT / "m0serve").glob("*.py")}
    assert in_tree <= installed, in_tree - installed
