"""The tests' mypy runs follow every import of the checked code, but not into installed
packages that neither little_workflow, fs_adapters nor the checked files import: numpy,
matplotlib, IPython, SQLAlchemy, LangSmith... come in through the dependencies of
dependencies (rich, langchain-core, pydantic-ai's extras) and made up over half of what a
cold `mypy little_workflow fs_adapters` analysed (door check: 30.8 -> 17.2 CPU-seconds, the
same errors). Where another package's signature names one of their types, mypy sees Any.
tests/test_typed_door.py checks that no module of the package imports them."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Installed packages reached only through other packages' imports (top-level names).
UNIMPORTED = (
    "IPython", "PIL", "cryptography", "flask", "griffe", "jinja2", "langsmith", "logfire_api",
    "matplotlib", "numpy", "pkg_resources", "prompt_toolkit", "psycopg", "pyparsing",
    "requests", "sqlalchemy", "tenacity", "traitlets", "urllib3", "wcwidth", "werkzeug",
)


def config_file(folder: str, *, project_settings: bool) -> str:
    """A mypy config in `folder`: the checkout's own [tool.mypy] settings when
    `project_settings` (else mypy's defaults, as a user's `mypy --strict file.py` has),
    plus UNIMPORTED skipped. Returns its path."""
    lines = ["[mypy]"]
    if project_settings:
        import tomllib

        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            settings = tomllib.load(f)["tool"]["mypy"]
        for key, value in settings.items():
            if isinstance(value, str):
                value = value.replace("$MYPY_CONFIG_FILE_DIR", ROOT)
            lines.append(f"{key} = {value}")
    lines += ["", "[mypy-" + ",".join(f"{name}.*" for name in UNIMPORTED) + "]",
              "follow_imports = skip",
              # numpy and others ship .pyi stubs, which mypy follows regardless without this.
              "follow_imports_for_stubs = True", ""]
    path = os.path.join(folder, "mypy-scope.ini")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
