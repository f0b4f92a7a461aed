"""IPython and Jupyter: ``%load_ext torchdoctor``, then ``%%torchdoctor`` watches a cell; ``%torchdoctor on|off`` every cell.

The cell magic runs its cell under a watch session and prints the report
under it (before the traceback, when the cell raises). ``%torchdoctor on``
watches each following cell from IPython's ``pre_run_cell`` to its
``post_run_cell`` event and prints a report under those that trained or
found something; ``%torchdoctor off`` stops. Findings in a cell read
``In[5]:3:9``, as IPython names the cell in its own tracebacks.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from typing import Any

_USAGE = ("usage: %%torchdoctor [--html PATH] [--no-env] [--output-format text|json] (first line of a cell), "
          "or %torchdoctor on|off [--no-env]")
_INPUT = re.compile(r"^<ipython-input-(\d+)-[0-9a-f]+>$")


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext torchdoctor``: register the magic (imports IPython only here)."""
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class TorchdoctorMagics(Magics):
        @line_cell_magic
        def torchdoctor(self, line: str = "", cell: str | None = None) -> Any:
            __tracebackhide__ = "__ipython_bottom__"  # IPython shows the cell's frames, not the magic's
            if cell is None:
                return _controller(self.shell).switch(line)
            return _controller(self.shell).watch_cell(line, cell)

    shell.register_magics(TorchdoctorMagics)
    _controller(shell)


def unload_ipython_extension(shell: Any) -> None:
    ctl = _CONTROLLERS.pop(id(shell), None)
    if ctl is not None:
        ctl.switch("off")
        ctl.forget_cells()


class _Options:
    def __init__(self, line: str, *, cell: bool) -> None:
        self.html: str | None = None
        self.env = True
        self.fmt = "text"
        self.switch: str | None = None
        words = shlex.split(line)
        while words:
            word = words.pop(0)
            if word == "--html" and words and cell:
                self.html = words.pop(0)
            elif word == "--output-format" and words and words[0] in ("text", "json") and cell:
                self.fmt = words.pop(0)
            elif word == "--no-env":
                self.env = False
            elif word in ("on", "off") and not cell and self.switch is None:
                self.switch = word
            else:
                raise _UsageError(f"torchdoctor: unexpected {word!r}. {_USAGE}")
        if not cell and self.switch is None:
            raise _UsageError(f"torchdoctor: say on or off. {_USAGE}")


class _UsageError(Exception):
    pass


class _Controller:
    """One per shell: the automatic watch's state and the cells' display names."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.auto: _Options | None = None
        self.session: Any = None  # the automatic watch of the running cell
        from torchdoctor.runtime import locate

        locate.set_cell_names(self._cell_name)

    def _cell_name(self, filename: str) -> str | None:
        number = getattr(getattr(self.shell, "compile", None), "_filename_map", {}).get(filename)
        if number is None:
            m = _INPUT.match(filename)
            number = int(m.group(1)) if m else None
        return f"In[{number}]" if number is not None else None

    def forget_cells(self) -> None:
        from torchdoctor.runtime import locate

        locate.set_cell_names(None)

    # -- %%torchdoctor -------------------------------------------------------
    def watch_cell(self, line: str, cell: str) -> Any:
        __tracebackhide__ = True
        try:
            opts = _Options(line, cell=True)
        except _UsageError as exc:
            print(exc, file=sys.stderr)
            return None
        self._drop_auto_session()  # this cell has its own session
        from torchdoctor.runtime.session import WatchSession

        session = WatchSession(environment=opts.env)
        try:
            with session:
                return self._run(line, cell)
        finally:
            _show(session, opts, always=True)

    def _run(self, line: str, cell: str) -> Any:
        """Run the cell as IPython would (its magics transformed); the last expression's value is returned.

        The magic's own line stays line 1 (as a comment), so that line numbers
        are those the notebook shows.
        """
        __tracebackhide__ = True
        shell = self.shell
        source = f"# %%torchdoctor {line}\n" + shell.transform_cell(cell)
        name = shell.compile.cache(source, _cell_number(shell), raw_code=f"%%torchdoctor {line}\n{cell}")
        tree = ast.parse(source, filename=name)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        namespace = shell.user_ns
        exec(compile(tree, name, "exec"), namespace)
        if last is not None:
            return eval(compile(ast.Expression(last.value), name, "eval"), namespace)
        return None

    # -- %torchdoctor on|off -------------------------------------------------
    def switch(self, line: str) -> None:
        try:
            opts = _Options(line, cell=False)
        except _UsageError as exc:
            print(exc, file=sys.stderr)
            return
        events = self.shell.events
        if opts.switch == "on" and self.auto is None:
            events.register("pre_run_cell", self._pre)
            events.register("post_run_cell", self._post)
        elif opts.switch == "off" and self.auto is not None:
            events.unregister("pre_run_cell", self._pre)
            events.unregister("post_run_cell", self._post)
            self._drop_auto_session()
        self.auto = opts if opts.switch == "on" else None
        print(f"torchdoctor: watching every cell{'' if opts.env else ' (no environment check)'}" if self.auto else
              "torchdoctor: no longer watching cells")

    def _pre(self, info: Any = None) -> None:
        from torchdoctor.runtime.session import WatchSession

        if self.session is None and self.auto is not None:
            session = WatchSession(environment=self.auto.env)
            session.__enter__()
            self.session = session

    def _post(self, result: Any = None) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        error = getattr(result, "error_in_exec", None)
        session.__exit__(type(error) if error is not None else None, error, getattr(error, "__traceback__", None))
        if self.auto is not None:
            _show(session, self.auto, always=False)

    def _drop_auto_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.__exit__(None, None, None)


_CONTROLLERS: dict[int, _Controller] = {}


def _controller(shell: Any) -> _Controller:
    ctl = _CONTROLLERS.get(id(shell))
    if ctl is None or ctl.shell is not shell:
        ctl = _CONTROLLERS[id(shell)] = _Controller(shell)
    return ctl


def _show(session: Any, opts: _Options, *, always: bool) -> None:
    """The report under the cell (standard output: in a notebook it belongs with the cell's output)."""
    stats = session.stats or {}
    if not always and not session.findings and not stats.get("forward_calls_audited"):
        return  # a cell that neither trained nor found anything: say nothing
    print(session.report(opts.fmt, title="torchdoctor"), end="")
    if opts.html:
        from torchdoctor.errors import TorchDoctorError
        from torchdoctor.report import write_text_atomic

        try:
            write_text_atomic(opts.html, session.report("html"))
        except TorchDoctorError as exc:
            print(f"torchdoctor: error: {exc}", file=sys.stderr)
        else:
            print(f"torchdoctor: HTML report written to {opts.html}")


def _cell_number(shell: Any) -> int:
    """The number the notebook shows for the running cell (In[N]). The cell's code was compiled under that
    number, so the compiler's map from file name to number finds it from the calling frames; the shell's
    ``execution_count`` is that number in IPython 8 but already the next one in IPython 9."""
    numbers = getattr(shell.compile, "_filename_map", None) or {}
    frame = sys._getframe(1)
    while frame is not None:
        number = numbers.get(frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        frame = frame.f_back
    return shell.execution_count  # type: ignore[no-any-return]

