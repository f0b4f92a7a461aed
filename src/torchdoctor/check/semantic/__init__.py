"""The checker's semantic model of one file, built by one walk; the only face the rules import.

``SemanticModel`` (model.py) holds the walk's index, names, bindings, kinds, calls, guards and
loops; ``models``, ``flow`` and ``program`` answer the questions several rules share. The
modules form a DAG: walk <- names <- bindings <- kinds <- calls <- guards <- loops <- model <-
(models, flow, program, loaders) <- this face; none of them imports this package back.
"""

from torchdoctor.check.semantic import flow, loaders, models, program
from torchdoctor.check.semantic.bindings import Binding
from torchdoctor.check.semantic.loops import LoopInfo
from torchdoctor.check.semantic.model import SemanticModel
from torchdoctor.check.semantic.text import short
from torchdoctor.check.semantic.walk import Frame

__all__ = ["SemanticModel", "Binding", "LoopInfo", "Frame", "flow", "loaders", "models", "program", "short"]
