"""The TD603 copies that keep what they copy, which ``steps.py`` leaves alone: an evaluation loop's outputs copied to
the host to be kept there (collected, handed to a metric, saved, handed back by a helper). ``waits.py`` has the reads
that must happen or wait for nothing new."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torchdoctor.check.astutil import dotted, func_params, method_name, param_default, strip_views
from torchdoctor.check.patterns import lazy
from torchdoctor.check.semantic import flow

if TYPE_CHECKING:
    from torchdoctor.check.context import Context


_COLLECTORS = frozenset({"append", "extend", "insert", "index_copy_", "copy_", "index_put_", "put_", "put"})
_ON_HOST = frozenset({"numpy", "detach", "float", "double", "long", "int", "half", "tolist", "squeeze", "flatten",
                      "view", "reshape", "index_select", "contiguous", "clone"})


_ALONG_AXIS = frozenset({"max", "min", "argmax", "argmin", "topk", "sort", "softmax", "log_softmax", "transpose",
                         "permute", "split", "chunk", "unbind"})  # on a host copy with a dimension given: still a
# tensor there (or its pieces: ``reps.extend(q.cpu().split(1, dim=0))``), not a number

_WRITES = lazy(r"(?i)(^|_)(save|savez|savez_compressed|savetxt|imsave|imwrite|write|savefig|add_images?|log_images?|vis"
               r"|visuali[sz]e|draw|plot|imshow)"
               r"(_|$)")


def _saves(call: ast.Call) -> bool:
    """``save_image(...)``, ``cv2.imwrite(...)``, ``writer.add_image(...)``, ``vis_detections(im, ...)``: writes or
    draws what it is given."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return bool(_WRITES.search(name or ""))


_ELEMENTWISE = frozenset({"view", "flatten", "reshape", "squeeze", "numpy", "tolist", "long", "int", "float"})


def _walked_on_the_host(ctx: Context, node: ast.Call) -> bool:
    """``for t, p in zip(y.cpu().view(-1), preds.cpu().view(-1)): cm[t, p] += 1``: an evaluation's labels and
    predictions copied once a batch and walked element by element on the host (a confusion matrix filled there)."""
    sem = ctx.semantic
    cur: ast.AST = node
    for _ in range(4):
        up = sem.parent(cur)
        if isinstance(up, ast.Attribute) and up.attr in _ELEMENTWISE and isinstance(call := sem.parent(up), ast.Call) \
                and call.func is up:
            cur = call
            continue
        break
    up = sem.parent(cur)
    if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in ("zip", "enumerate") and cur in up.args:
        cur, up = up, sem.parent(up)
    return isinstance(up, (ast.For, ast.comprehension)) and up.iter is cur


def phase_without_backward(ctx: Context, node: ast.AST, region: ast.AST) -> bool:
    """``node`` runs in a phase other than the one that backpropagates, in ``region`` (a function ``f(phase)``, or a
    loop of one): in ``elif phase == Phase.VAL:`` (or the ``else`` of ``if phase == Phase.TRAIN:``) where every
    ``backward()`` of the region sits under ``if phase == Phase.TRAIN:`` (pyGAT-style full-batch ``main_loop(phase)``;
    a loop shared by ``to_do`` "train", "valid" and "forward" that writes the outputs out in its forward phase)."""
    sem = ctx.semantic
    func = region if isinstance(region, (ast.FunctionDef, ast.AsyncFunctionDef)) else sem.function_of(region)
    if func is None:
        return False
    params = set(func_params(func))  # type: ignore[arg-type]

    def setting(name: str, at: ast.AST) -> bool:  # a parameter; in a loop, also a name bound before it (``to_do = ...``)
        b = sem.binding_at(name, at)
        return name in params if region is func else b is not None and not sem.contains(region, b.node)

    def phase_test(test: ast.AST) -> tuple[str, str] | None:  # ``phase == Phase.TRAIN`` -> ("phase", "Phase.TRAIN")
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) \
                and isinstance(test.left, ast.Name) and setting(test.left.id, test):
            return test.left.id, sem.segment(test.comparators[0])
        return None

    trains: set[tuple[str, str]] = set()
    for call in sem.local_nodes(func) if region is func else sem.body(region):
        if isinstance(call, ast.Call) and (method_name(call) == "backward" or not isinstance(call.func, ast.Attribute)
                                           and "backward" in sem.region_effects([call])):  # (``_optimization_step(...)``)
            up = next((a for a in sem.ancestors(call) if isinstance(a, ast.If) and phase_test(a.test)
                       and any(sem.contains(s, call) for s in a.body)), None)
            if up is None:
                return False  # (a backward in every phase)
            trains.add(phase_test(up.test))  # type: ignore[arg-type]
    if len(trains) != 1:
        return False
    (param, value), = trains
    return any((said := phase_test(test)) and said[0] == param and holds != (said[1] == value)
               for test, holds in sem.guards.branch_tests(node))  # (the body of another phase, or the training one's else)


_SCALAR_REDUCTIONS = frozenset({"mean", "sum"})  # (not ``torch.max(probs)``: a batch of one's prediction)


def _scalar_copied(ctx: Context, node: ast.Call) -> bool:
    """The copy's receiver is one number: a reduction over everything (``torch.mean(acc)``, ``err.sum()``) or a name
    bound to a loss (``loss = criterion(out, y)``): collecting it reads the device back once a batch, for a number
    the device could have summed itself."""
    from torchdoctor.check.semantic import flow

    sem = ctx.semantic
    recv = strip_views(node.func.value) if isinstance(node.func, ast.Attribute) else None
    if isinstance(recv, ast.Name) and (b := sem.binding_at(recv.id, node)) is not None and not b.is_param \
            and b.index is None and isinstance(b.value, ast.Call):
        if flow.consumer_kind(sem, b.value) == "loss":
            return True
        recv = b.value
    if not isinstance(recv, ast.Call) or recv.keywords:
        return False
    name = sem.call_name(recv) or ""
    if name.startswith("torch.") and name.split(".")[-1] in _SCALAR_REDUCTIONS and len(recv.args) == 1:
        return True  # ``torch.mean(acc)``
    return isinstance(recv.func, ast.Attribute) and recv.func.attr in _SCALAR_REDUCTIONS and not recv.args \
        and not name.startswith("numpy.")  # ``err.sum()``


def _spread_into_a_list(sem, node: ast.Call) -> bool:  # type: ignore[no-untyped-def]
    """``res[name]["acc"] += l.tolist()`` (or ``accs.extend(l.tolist())``): a list grown by the copy's items, so the
    tensor has a dimension (a 0-dim one gives a float, which neither takes): one value a sample, though made by a
    loss function (``per_sample=True``)."""
    if method_name(node) != "tolist":
        return False
    up = sem.parent(node)
    return isinstance(up, ast.AugAssign) and isinstance(up.op, ast.Add) and up.value is node \
        or isinstance(up, ast.Call) and method_name(up) == "extend" and up.args == [node]


def collected_on_host(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """An evaluation loop's outputs copied to the host to be kept there: ``feats.append(out.cpu())``,
    ``preds.extend(logits.argmax(-1).tolist())``, ``bank.index_copy_(0, idx.cpu(), out.cpu())``, ``preds[i] =
    out.cpu()``, or written out: ``save_image(denorm(x.cpu()), path)``. The metrics (or a feature bank bigger than the GPU's memory) need them on the host, and the only
    copy-free way keeps every batch on the device; a scalar read (``.item()``) still counts."""
    sem = ctx.semantic
    if node.func.attr == "item" or sem.loop_kind(loop) == "train" and not phase_without_backward(ctx, node, loop):  # type: ignore[attr-defined]
        return False  # (a loop that neither trains nor is named for evaluation, edm's sampling loop, keeps them too)
    if _scalar_copied(ctx, node) and not _spread_into_a_list(sem, node):
        return False  # (``losses.append(loss.cpu())``, ``accs.append(torch.mean(acc).cpu())``: one number a batch)
    if _copied_for_host_processing(ctx, node, loop) or _walked_on_the_host(ctx, node):
        return True
    if not sem.contains(loop, node) and returned_copy(ctx, node):
        return True  # in a helper the evaluation loop calls, which hands the copy back
    cur: ast.AST = node
    as_array = False
    for _ in range(8):
        up = sem.parent(cur)
        if isinstance(up, ast.Attribute) and up.attr == "data" and not (isinstance(sem.parent(up), ast.Call)
                                                                       and sem.parent(up).func is up):
            cur = up  # ``out.cpu().data``
            continue
        if not as_array and isinstance(up, ast.Subscript) and up.value is cur and isinstance(up.slice, ast.Constant) \
                and isinstance(sem.parent(up), ast.Attribute) and sem.parent(up).attr == "numpy":
            cur = up  # ``out.cpu().data[0].numpy()``: the first sample of the copy, then its array
            continue
        if isinstance(up, ast.Attribute) and up.attr in _ALONG_AXIS and not as_array \
                and isinstance(call := sem.parent(up), ast.Call) and call.func is up and (call.args or call.keywords):
            cur = call  # ``out.cpu().data.max(2)``: along an axis, a tensor (with ``[1]``, its indices) on the host
            if isinstance(sem.parent(cur), ast.Subscript) and sem.parent(cur).value is cur:
                cur = sem.parent(cur)
            continue
        if isinstance(up, ast.Attribute) and up.attr in ("to", "type") and isinstance(call := sem.parent(up), ast.Call) \
                and call.func is up and (call.args or call.keywords) and all(
                    (dotted(a) or "").startswith("torch.") and not (dotted(a) or "").startswith("torch.device")
                    for a in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]):
            cur = call  # ``y.view(-1).cpu().to(torch.float)``: a dtype cast of the host copy, still on the host
            continue
        if isinstance(up, ast.Attribute) and (up.attr in _ON_HOST or as_array):
            call = sem.parent(up)
            if as_array and up.attr in _REDUCTIONS and isinstance(call, ast.Call) and call.func is up \
                    and not call.args and not call.keywords:
                return False  # ``err.cpu().numpy().mean()``: one number a batch, which the device could have made
            if isinstance(call, ast.Call) and call.func is up:
                as_array = as_array or up.attr in ("numpy", "tolist")
                cur = call  # after ``.numpy()`` every method is NumPy's: ``.argmax(axis=1)``, ``.astype(np.uint8)``
                continue
            if as_array and up.attr == "T":
                cur = up  # ``out.cpu().numpy().T``: the host array, transposed
                continue
            return False
        if as_array and isinstance(up, ast.comprehension) and up.iter is cur:
            comp, outer = sem.parent(up), sem.parent(sem.parent(up))  # ``texts.extend([decode(x) for x in ids.cpu().numpy()])``
            return isinstance(comp, ast.ListComp) and (isinstance(outer, ast.AugAssign) or isinstance(outer, ast.Call)
                                                       and comp in outer.args and _keeps(outer))
        if as_array and (isinstance(up, ast.BinOp) or isinstance(up, ast.Subscript) and up.value is cur):
            cur = up  # ``(mask.cpu().numpy() * 255)``: arithmetic on the host array
            continue
        if isinstance(up, ast.IfExp) and cur in (up.body, up.orelse) and (as_array or method_name(cur) == "tolist"):
            cur = up  # ``gold = y.cpu().numpy() if use_labels else None``, ``tcls = labels[:, 0].tolist() if nl else []``:
            # the copy or nothing, kept alike
            continue
        if isinstance(up, ast.BinOp) and all(method_name(side) == "cpu" for side in (up.left, up.right)):
            cur = up  # ``net(x).cpu() + net(flipped).cpu()``: both copies, added on the host
            continue
        if isinstance(up, ast.Call) and cur in up.args and (ctx.call_name(up) or "") in _AS_ARRAY:
            as_array, cur = True, up  # ``np.asarray(f.cpu())``: a NumPy array of the copy
            continue
        if isinstance(up, ast.Compare) and up.left is cur and all(isinstance(c, ast.Constant) for c in up.comparators) \
                and isinstance(sel := sem.parent(up), ast.Call) and up in sel.args[:1] \
                and (ctx.call_name(sel) or "") in _SELECTIONS:
            return True  # ``idxs = np.where(scores.cpu() > 0.5)``: the copy's indices, picked on the host
        if as_array and isinstance(up, ast.Call) and up.args[:1] == [cur] and (q := ctx.call_name(up) or "").startswith(
                "numpy.") and q.rsplit(".", 1)[-1] in ("argmax", "argmin", "argsort", "round", "clip", "squeeze",
                                                        "transpose", "where") \
                and (q.rsplit(".", 1)[-1] not in ("argmax", "argmin") or any(k.arg == "axis" for k in up.keywords)
                     or len(up.args) > 1):
            cur = up  # ``label = np.argmax(out.cpu().numpy(), axis=1)``: per-row results, a host array still
            continue
        if as_array and isinstance(up, (ast.Tuple, ast.List)) and isinstance(joined := sem.parent(up), ast.Call) \
                and joined.args[:1] == [up] and (ctx.call_name(joined) or "") in _JOINS:
            keeper = sem.parent(joined)  # ``all_boxes[j][i] = np.hstack((boxes.cpu().numpy(), scores[:, None]))``: one
            if isinstance(keeper, ast.Assign) and all(isinstance(t, ast.Subscript) for t in keeper.targets) \
                    or isinstance(keeper, ast.Call) and joined in keeper.args and _keeps(keeper):  # host array, kept
                return True
            if isinstance(keeper, ast.Assign) and (name := bound_name(keeper)) is not None \
                    and (region := loop if sem.contains(loop, keeper) else sem.function_of(keeper)) is not None \
                    and _name_kept(ctx, name, keeper, region):
                return True  # ``out = np.concatenate([a.cpu().numpy(), ...])``, then ``outs.append(out)``
        if as_array and isinstance(up, ast.Call) and cur in up.args and isinstance(up.func, ast.Name) \
                and up.func.id in ("list", "tuple", "zip", "dict", "sorted"):
            cur = up  # ``evaluator.add(dict(zip(ids, list(out.cpu().numpy()))))``: the arrays, repacked on the host
            continue
        if isinstance(up, ast.Dict) and cur in up.values and isinstance(sem.parent(up), ast.Call) \
                and up in sem.parent(up).args and _saves(sem.parent(up)):
            return True  # ``np.save(path, {"coarse": heat.cpu(), ...})``: serialised to disk
        if as_array and isinstance(up, ast.keyword) and isinstance(call := sem.parent(up), ast.Call) and _saves(call) \
                and (ctx.call_name(call) or "").startswith(("numpy.", "np.")):
            return True  # ``np.savez(path, code=codes[k].cpu().numpy())``: serialised to disk
        if isinstance(up, ast.Call) and cur in up.args:
            if _keeps(up) or as_array and (_host_function(ctx, up) or method_name(up) == "add"):
                return True  # (``evaluator.add(...)`` of host arrays: a metric object's update)
            if _saves(up) and (ctx.call_name(up) or "").startswith(("numpy.", "np.")):
                return True  # ``np.save(path, out.cpu().numpy())``: written to disk
            if (each := _element_reads(sem, cur)) is not None:  # ``for k, prob in zip(idx, p[:, 1].tolist()):``
                return bool(each[1]) and all(_kept_directly(sem, r) for r in each[1])
            outer = sem.parent(up)  # ``save_image(denorm(x.cpu()), path)``: written out after one host transform
            if isinstance(outer, (ast.List, ast.Tuple)) and not (ctx.call_name(up) or "").startswith("torch.") \
                    and flow.consumer_kind(sem, up) is None:  # ``shown.extend([to_pil(img.cpu()), ...])``: kept
                keeper = sem.parent(outer)  # (as images for a grid written after the loop)
                return isinstance(keeper, ast.AugAssign) or isinstance(keeper, ast.Call) and outer in keeper.args \
                    and _keeps(keeper)
            if as_array and isinstance(outer, ast.Call) and up in outer.args and _keeps(outer) \
                    and not (ctx.call_name(up) or "").startswith("torch.") and flow.consumer_kind(sem, up) is None:
                return True  # ``predict_list.append(vocab.label_to_string(y_hat[i].cpu().numpy()))``: decoded on the
                # host, kept (a transcript for the results file)
            return isinstance(outer, ast.Call) and up in outer.args and _saves(outer)
        if isinstance(up, (ast.ListComp, ast.GeneratorExp)) and up.elt is cur or isinstance(up, ast.DictComp) \
                and up.value is cur:
            return True  # ``[model(x).cpu().numpy() for x, _ in loader]``: the comprehension collects them
        if isinstance(up, (ast.List, ast.Tuple)):
            outer = sem.parent(up)  # ``preds += [out.cpu()]``, ``samples.append((img.cpu().numpy(), t, p))``
            if isinstance(outer, ast.Assign) and outer.value is up and len(outer.targets) == 1 \
                    and isinstance(target := outer.targets[0], ast.Tuple) and len(target.elts) == len(up.elts) \
                    and isinstance(name := target.elts[up.elts.index(cur)], ast.Name):
                region = loop if sem.contains(loop, outer) else sem.function_of(outer)  # ``z, y = z.cpu(), y``
                return region is not None and _name_kept(ctx, name.id, outer, region)
            if isinstance(outer, (ast.ListComp, ast.GeneratorExp)) and outer.elt is up:
                return True  # ``[[model(x).cpu().numpy(), y.cpu().numpy()] for x, y in loader]``: collected in pairs
            return isinstance(outer, ast.AugAssign) or isinstance(outer, ast.Call) and up in outer.args and _keeps(outer) \
                or _grown_on_host(ctx, up, outer)
        if isinstance(up, ast.AugAssign) and isinstance(up.op, ast.Add) and up.value is cur:
            # ``preds += out.argmax(-1).tolist()``, ``preds += list(labels.cpu().numpy())``; ``probs += prob.cpu()``
            # into ``probs = torch.zeros(n, c, h, w)``; not ``logs += losses.mean(dim=0).cpu().numpy()``: a statistic
            # the device could have summed, read back each batch only to be added up
            if _reduced(sem, node.func.value) and method_name(cur) != "tolist":  # type: ignore[attr-defined]
                return False  # (also through a name: ``loss_per_var = crit(out, y).mean(dim=0)``, then its copy)
            return method_name(cur) == "tolist" or as_array and isinstance(cur, ast.Call) \
                and isinstance(cur.func, ast.Name) and cur.func.id in ("list", "tuple") \
                or method_name(node) == "cpu" and _host_buffer(ctx, up.target, up) \
                or as_array and (isinstance(up.target, ast.Subscript)  # ``scr[i] += out.cpu().numpy()``: a host array
                                 or _host_buffer(ctx, up.target, up))  # ``total += out.cpu().numpy()``, ``np.zeros``
        if isinstance(up, ast.Assign) and up.value is cur:
            if (name := bound_name(up)) is not None:  # ``preds = out.cpu().numpy()``, kept next
                # (in a helper the loop calls: its reads in the helper's own body)
                region = loop if sem.contains(loop, up) else sem.function_of(up)
                return region is not None and _name_kept(ctx, name, up, region)
            return all(isinstance(t, ast.Subscript) for t in up.targets)  # ``preds[i] = out.cpu()``
        return False
    return False


def _reduced(sem, recv: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``recv`` is a reduction (``losses.mean(dim=0)``), or a name bound to a statistic (not ``labels =
    torch.argmax(logits, dim=1)``, one label a sample, kept)."""
    if isinstance(recv, ast.Name) and (b := sem.binding_at(recv.id, recv)) is not None and not b.is_param \
            and b.index is None and isinstance(value := b.value, ast.Call):
        if method_name(value) not in _STATISTICS:
            return False
        over = value.args[1:2] if (sem.call_name(value) or "").startswith("torch.") else value.args[:1]
        over += [k.value for k in value.keywords if k.arg in ("dim", "axis")]
        return all(isinstance(d, ast.Constant) and d.value == 0 for d in over)  # (over the batch, or everything; not
        # ``torch.sum(err, dim=tuple(range(1, err.dim())))``: one score a sample, kept)
    return method_name(recv) in _REDUCTIONS


_LOSS_NAME = lazy(r"(?i)loss|criterion|crit$")
_REDUCTIONS = frozenset({"mean", "sum", "max", "min", "argmax", "argmin", "median", "std", "var", "prod", "norm",
                         "amax", "amin", "any", "all", "nanmean", "nansum"})
_STATISTICS = frozenset({"mean", "sum", "std", "var", "norm", "nanmean", "nansum", "prod", "median"})
_SCALAR_SINKS = frozenset({"float", "int", "round", "bool", "print", "str", "repr", "len"})


_HOST_SELECTIONS = frozenset({"numpy.where", "numpy.nonzero", "numpy.argwhere", "numpy.flatnonzero"})


def _copied_for_host_processing(ctx: Context, node: ast.Call, loop: ast.AST) -> bool:
    """``boxes = boxes.cpu().numpy()``, ``flow = padder.unpad(pred[0]).cpu()`` in a loop that does not train: an
    output copied once and bound to a name for host work (decoding, non-max suppression, metrics, files): some
    read of it goes on as an array. Not when every read only makes a number of it that the device could have
    made (``float(arr.mean())``, ``.item()``, a loss, a printed or summed value)."""
    sem = ctx.semantic
    stmt = sem.statement_of(node)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    cur: ast.AST = node
    while cur is not stmt.value:  # ``.cpu().numpy()[:, 1]``, ``.cpu() * scale``: the copy itself, bound to the name
        up = sem.parent(cur)
        if isinstance(up, ast.Attribute) and up.attr != "item" and up.attr not in _REDUCTIONS \
                or isinstance(up, ast.Call) and up.func is cur or isinstance(up, ast.Subscript) and up.value is cur \
                or isinstance(up, ast.BinOp) or isinstance(up, ast.Call) and cur in up.args and not _makes_a_number(ctx, up):
            cur = up  # (``torch.sum((flow.cpu() - gt) ** 2, dim=0)``, ``clamp(boxes.cpu(), w, h)``: host work on it)
            continue
        if isinstance(up, ast.Compare) and isinstance(where := sem.parent(up), ast.Call) and up in where.args \
                and (ctx.call_name(where) or "") in _HOST_SELECTIONS:
            cur = where  # (``np.where(probs.cpu()[i] > thresh)``: the indices decoding walks, picked on the host)
            continue
        if isinstance(up, ast.Tuple) and up is stmt.value:
            cur = up  # (``heads, tails = np.where(h.cpu() > t), np.where(t.cpu() > t)``: each bound to its name)
            continue
        return False  # (read as a number, formatted, compared: not the copy kept under a name)
    target = stmt.targets[0]
    names = [e.id for e in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(e, ast.Name)]
    region = loop if sem.contains(loop, stmt) else sem.function_of(stmt)
    if not names or region is None:  # (``preds, maxvals = decode(out.cpu().numpy(), c, s)``: what it makes of it)
        return False
    return any(_goes_on_as_array(ctx, name, stmt, region, 0) for name in names)


def _goes_on_as_array(ctx: Context, name: str, stmt: ast.AST, region: ast.AST, depth: int) -> bool:
    return any(_read_as_array(ctx, r, region, depth) for r in reads_after(ctx, name, stmt, region))


def _read_as_array(ctx: Context, n: ast.AST, region: ast.AST, depth: int) -> bool:
    """The host array read at ``n`` is used as an array (stored, handed on, transformed and kept), not only
    turned into a number."""
    sem = ctx.semantic
    up = sem.parent(n)
    while True:  # through reductions, arithmetic and slicing: what comes out of them is what counts
        if isinstance(up, ast.Attribute) and up.attr == "item" or isinstance(up, ast.Attribute) and up.attr in _METADATA:
            return False
        if isinstance(up, ast.Attribute) and up.attr in _REDUCTIONS and isinstance(call := sem.parent(up), ast.Call) \
                and call.func is up:
            n, up = call, sem.parent(call)
            continue
        if isinstance(up, ast.Call) and n in up.args and (q := ctx.call_name(up) or "").startswith(("numpy.", "torch.")) \
                and q.rsplit(".", 1)[-1] in _REDUCTIONS:
            n, up = up, sem.parent(up)
            continue
        if isinstance(up, (ast.BinOp, ast.UnaryOp)) or isinstance(up, ast.Subscript) and up.value is n:
            n, up = up, sem.parent(up)
            continue
        if isinstance(up, ast.Compare) and len(up.ops) == 1 and (
                isinstance(sem.parent(up), ast.Assign) and sem.parent(up).value is up
                or isinstance(sem.parent(up), ast.Call) and up in sem.parent(up).args
                and (ctx.call_name(sem.parent(up)) or "").startswith("numpy.")):
            n, up = up, sem.parent(up)  # ``mask = (pred_np == cl)``, ``np.logical_and(pred_np == cl, ...)``: a mask
            continue
        break
    if isinstance(up, (ast.FormattedValue, ast.JoinedStr, ast.Compare, ast.BoolOp, ast.If, ast.While, ast.AugAssign)):
        return False  # printed, tested or summed: a number
    if isinstance(up, ast.Call) and n in up.args:
        return not _makes_a_number(ctx, up)
    if isinstance(up, ast.Assign) and up.value is n and depth < 2 and (other := bound_name(up)) is not None:
        return _goes_on_as_array(ctx, other, up, region, depth + 1)  # ``image = image.mean()``, ``peek = shown``
    if isinstance(up, ast.For) and up.iter is n and isinstance(up.target, ast.Name) and depth < 2:
        return _goes_on_as_array(ctx, up.target.id, up.target, up, depth + 1)  # ``for value in values: ...``
    return not isinstance(up, ast.Expr)


def _makes_a_number(ctx: Context, call: ast.Call) -> bool:
    """A call that turns what it is given into a number: ``float()``, a loss, a logger, a helper of this file whose
    every return is one (``dice(probs, target)`` returning ``(...).item()``)."""
    sem = ctx.semantic
    callee = dotted(call.func) or ""
    if callee in _SCALAR_SINKS or _LOSS_NAME.search(callee) or sem.expr_kind(call.func, call) == "loss_fn" \
            or callee.startswith(("logging.", "logger.", "log.")):
        return True
    funcs = sem.resolve(call)
    return bool(funcs) and all(_returns_number(sem, f) for f in funcs)


def _returns_number(sem: object, func: ast.AST) -> bool:
    """Every ``return`` of ``func`` hands back one number: ``(...).item()``, ``float(...)``, a reduction
    (``(2 * inter + eps) / (p.sum() + t.sum() + eps)`` with ``inter = (p * t).sum()``)."""
    values = sem.kinds.returned_values(func)  # type: ignore[attr-defined]
    return values is not None and all(_a_number(sem, v, v, 0) for v in values)


def _a_number(sem: object, v: ast.AST, at: ast.AST, depth: int) -> bool:
    if isinstance(v, ast.Constant):
        return isinstance(v.value, (int, float))
    if isinstance(v, ast.Call):
        return isinstance(v.func, ast.Attribute) and (v.func.attr == "item" or v.func.attr in _REDUCTIONS
                                                      and not v.args and not v.keywords) \
            or dotted(v.func) in ("float", "int")
    if isinstance(v, ast.BinOp):
        return _a_number(sem, v.left, at, depth) and _a_number(sem, v.right, at, depth) and not (
            isinstance(v.left, ast.Constant) and isinstance(v.right, ast.Constant))
    if isinstance(v, ast.Name) and depth < 2:
        b = sem.binding_at(v.id, at)  # type: ignore[attr-defined]
        if b is not None and b.is_param:  # ``eps=1e-7``
            default = param_default(b.node, v.id) if isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            return isinstance(default, ast.Constant) and isinstance(default.value, (int, float))
        return b is not None and b.value is not None and _a_number(sem, b.value, b.node, depth + 1)
    return False


def bound_name(stmt: ast.AST | None) -> str | None:
    """The one name an assignment binds (``preds = ...``), else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def reads_after(ctx: Context, name: str, stmt: ast.AST, region: ast.AST) -> list[ast.AST]:
    """The reads of ``name`` in ``region`` (a loop or a function) after ``stmt``, its own value included."""
    sem = ctx.semantic
    after = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)  # type: ignore[attr-defined]
    return [n for n in sem.reads_of(name) if sem.contains(region, n) and (n.lineno, n.col_offset) > after]  # type: ignore[attr-defined]


def returned_copy(ctx: Context, node: ast.Call) -> bool:
    """A helper of an evaluation loop that returns its output copied to the host: ``y = y.data.cpu().numpy();
    return y.transpose(1, 2, 0)`` (a sliding-window predictor whose caller sums the maps with NumPy and saves them)."""
    sem = ctx.semantic
    cur: ast.AST = node
    up = sem.parent(cur)
    as_array = False  # (after ``.numpy()`` every method is NumPy's: ``.astype(np.float64)``, ``.ravel()``)
    while isinstance(up, ast.Attribute) and (up.attr in _ON_HOST or as_array) and isinstance(call := sem.parent(up), ast.Call) \
            and call.func is up or isinstance(up, ast.Subscript) and up.value is cur and method_name(cur) == "numpy":
        cur = up if isinstance(up, ast.Subscript) else sem.parent(up)  # (``.cpu().numpy()[:, 0]``: a slice of the array)
        as_array = as_array or method_name(cur) in ("numpy", "tolist")
        up = sem.parent(cur)
    if isinstance(up, ast.Dict) and cur in up.values:  # ``{"rois": boxes.cpu().numpy(), ...}``: a record of arrays
        cur, up = up, sem.parent(up)
    for _ in range(3):  # ``return z.cpu() if keep_on_host else z``, ``(D[0].cpu(), *D[1:]) if tuple else D.cpu()``
        if isinstance(up, ast.IfExp) and cur in (up.body, up.orelse) or isinstance(up, ast.Tuple) \
                and isinstance(sem.parent(up), ast.IfExp):
            cur, up = up, sem.parent(up)
    if isinstance(up, ast.Return) or isinstance(up, ast.Tuple) and isinstance(sem.parent(up), ast.Return):
        return True  # (``return probs, probs.argmax(1).cpu().numpy()``: one element of what it hands back)
    if isinstance(up, ast.Lambda) and up.body is cur:
        return True  # ``score = lambda x: x.max(-1).values.cpu().numpy()``: the lambda hands the array back
    func, name = sem.function_of(node), bound_name(up)
    if func is not None and isinstance(up, ast.Call) and method_name(up) == "append" and cur in up.args \
            and isinstance(kept := up.func.value, ast.Name):  # type: ignore[attr-defined]
        made = sem.binding_at(kept.id, up)  # ``results.append(x[:n].cpu().numpy())`` ... ``return results``
        return made is not None and isinstance(made.value, ast.List) and not made.value.elts \
            and sem.scope_of(made.node) is func and any(
                isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id == kept.id
                for r in sem.local_nodes(func))
    if func is None or name is None:
        return False
    uses = reads_after(ctx, name, up, func)  # type: ignore[arg-type]

    def chain_of(value: ast.AST | None, n: ast.AST) -> bool:  # ``y``, ``y.transpose(1, 2, 0)``: the array itself
        while isinstance(value, (ast.Call, ast.Attribute)):
            value = value.func if isinstance(value, ast.Call) else value.value
        return value is n

    def handed_back(n: ast.AST) -> bool:  # returned, or rebound to itself on the host: ``y = y.transpose(1, 2, 0)``
        stmt = sem.statement_of(n)
        if isinstance(stmt, ast.Return):
            return chain_of(stmt.value, n)
        return bound_name(stmt) == name and chain_of(stmt.value, n)  # type: ignore[union-attr]

    return bool(uses) and all(handed_back(n) for n in uses) and any(
        isinstance(sem.statement_of(n), ast.Return) for n in uses)


# a metric object's per-batch update with host arrays: ``metrics.update(targets, preds)``, ``evaluator.add_batch``
_METRIC_UPDATES = frozenset({"update", "add_batch", "addBatch", "process", "accumulate"})


_IN_PLACE_INTO = ("add_", "copy_", "index_add_", "index_copy_")


def _into_host_buffer(ctx: Context, call: ast.Call) -> bool:
    """``canvas[..., a:b].add_(patch)`` on ``canvas = torch.zeros(...)`` made without a device (or
    ``torch.zeros_like`` of one): the result is put together on the host, where it fits."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in _IN_PLACE_INTO):
        return False
    return _host_buffer(ctx, call.func.value, call)


def _host_buffer(ctx: Context, target: ast.AST, call: ast.AST) -> bool:
    """``canvas`` (or ``canvas[..., a:b]``) made by ``torch.zeros(...)`` without a device, or a ``*_like`` of one."""
    while isinstance(target, ast.Subscript):
        target = target.value
    for _ in range(3):
        if not isinstance(target, ast.Name):
            return False
        b = ctx.semantic.binding_at(target.id, call)
        value = b.value if b is not None and not b.is_param else None
        if not isinstance(value, ast.Call) or any(k.arg == "device" for k in value.keywords):
            return False
        name = ctx.call_name(value) or ""
        if name in ("torch.zeros", "torch.ones", "torch.empty", "torch.full", "numpy.zeros", "numpy.ones", "numpy.empty",
                    "numpy.full"):
            return True  # (a NumPy array: on the host whatever it is given)
        if name not in ("torch.zeros_like", "torch.ones_like", "torch.empty_like") or not value.args:
            return False
        target = value.args[0]
    return False


def _keeps(call: ast.Call) -> bool:
    """A call that keeps or writes out what it is given: a collector, a metric's update, a save or a plot."""
    return isinstance(call.func, ast.Attribute) and call.func.attr in _COLLECTORS | _METRIC_UPDATES or _saves(call)


def _name_kept(ctx: Context, name: str, assign: ast.Assign, loop: ast.AST) -> bool:
    """``preds = out.argmax(1).cpu().numpy()`` then ``metrics.update(targets, preds)`` in the same evaluation loop:
    every read of ``preds`` after it, in the loop, hands it to something that keeps it, whole or inside a tuple
    (``samples.append((img, preds[0]))``) or through a wrapper (``Image.fromarray(img).save(path)``), takes one of
    its elements on the host (``pred = preds[i]``), or rebinds it on the host (whose reads are these reads too)."""
    sem = ctx.semantic
    uses = reads_after(ctx, name, assign, loop)
    # copied into NumPy (or a list): a host-side metric's input; a ``.cpu()`` tensor could have stayed on the device
    as_arrays = any(isinstance(n, ast.Attribute) and n.attr in ("numpy", "tolist") for n in sem.subtree(assign.value))

    def kept(n: ast.AST, name: str = name, depth: int = 0) -> bool:
        up = sem.parent(n)
        if isinstance(up, ast.Subscript) and up.value is n or isinstance(up, ast.Attribute) and up.attr in _METADATA:
            return True  # an element of the host array, or its shape
        if as_arrays and _written_as_text(ctx, n):
            return True  # ``for p in pred: f.write(f"{p}\n")``: written out as text
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id == "len" and up.args == [n]:
            return True  # ``for j in range(len(pred)):``: its length, on the host
        if isinstance(up, ast.Assign) and up.value is n and all(isinstance(t, ast.Subscript) for t in up.targets):
            return True  # stored into a host array: ``full_mask[h0:h1, w0:w1] = t_mask``
        if isinstance(up, ast.Attribute) and isinstance(call := sem.parent(up), ast.Call) and call.func is up \
                and _saves(call):
            return True  # ``prediction.save(path)``: a PIL image made from it on the host, written out
        if bound_name(sem.statement_of(n)) == name:
            return True  # rebound on the host (``image = (denorm(image) * 255).astype(np.uint8)``): its reads count
        if depth < 2 and isinstance(up, ast.Assign) and up.value is n and (other := bound_name(up)) is not None:
            reads = reads_after(ctx, other, up, loop)  # ``pred = outputs``: an alias, kept as ``pred``
            return bool(reads) and all(kept(r, other, depth + 1) for r in reads)
        if (each := _element_reads(sem, n)) is not None:  # ``for seed, image in zip(seeds, images): ...save(...)``
            element, reads = each
            return bool(reads) and all(kept(r, element) for r in reads)
        if isinstance(up, ast.keyword) and isinstance(record := sem.parent(up), ast.Call) and _record(ctx, record):
            n, up = record, sem.parent(record)  # ``row = CodeRow(top=top, name=f)``: a record of host values
            if depth < 2 and isinstance(up, ast.Assign) and (other := bound_name(up)) is not None and other != name:
                reads = reads_after(ctx, other, up, loop)
                return bool(reads) and all(kept(r, other, depth + 1) for r in reads)
        while isinstance(up, ast.Call) and n in up.args and not _keeps(up) and _on_host(ctx, up):  # ``np.argmax(arr)``
            n, up = up, sem.parent(up)
            while isinstance(up, ast.Attribute) and up.attr in _ARRAY_METHODS and isinstance(call := sem.parent(up), ast.Call) \
                    and call.func is up:  # ``np.argmax(confs, axis=1).flatten()``
                n, up = call, sem.parent(call)
            if depth < 2 and isinstance(up, ast.Assign) and (other := bound_name(up)) is not None and other != name:
                reads = reads_after(ctx, other, up, loop)  # ``labels = np.argmax(confs, 1)``, then kept as ``labels``
                return bool(reads) and all(kept(r, other, depth + 1) for r in reads)
            if isinstance(up, ast.Assign) and up.value is n and all(isinstance(t, ast.Subscript) for t in up.targets):
                return True  # ``store[key] = pickle.dumps(row)``: stored on the host
        if as_arrays and isinstance(up, ast.AugAssign) and isinstance(up.op, ast.Add) and up.value is n:
            return _a_list(sem, up.target, up)  # ``all_preds += batch_preds`` of ``batch_preds = list(out.cpu().numpy())``
            # (a list grown on the host; not ``epoch_acc += acc`` of a copied count)
        while as_arrays and isinstance(up, ast.Attribute) and up.attr in _ARRAY_METHODS \
                and isinstance(call := sem.parent(up), ast.Call) and call.func is up:
            n, up = call, sem.parent(call)  # ``labels.extend(cls.tolist())``: the array's own methods, on the host
        if isinstance(up, ast.Dict) and n in up.values:  # ``res[int(img_id)] = {"boxes": torch.as_tensor(arr), ...}``
            while isinstance(up, (ast.Dict, ast.List, ast.Tuple)):
                n, up = up, sem.parent(up)
            return isinstance(up, ast.Assign) and up.value is n and all(isinstance(t, ast.Subscript) for t in up.targets) \
                or isinstance(up, ast.Call) and n in up.args and _keeps(up)
        if isinstance(up, (ast.Tuple, ast.List)):
            n, up = up, sem.parent(up)
        while isinstance(up, ast.Call) and n in up.args and isinstance(up.func, ast.Name) and up.func.id in ("list", "tuple"):
            n, up = up, sem.parent(up)  # ``seg_metrics(list(preds), list(truths))``
        if isinstance(up, ast.keyword) and isinstance(sem.parent(up), ast.Call):
            n, up = up, sem.parent(up)  # ``paint(pred_map=pred)``: handed by keyword, as positionally
        if not (isinstance(up, ast.Call) and (n in up.args or n in up.keywords)):
            return False
        if _keeps(up) or as_arrays and _host_function(ctx, up):
            return True  # a metric, or a function of this file, handed NumPy arrays (``seg_metrics(list(p), list(t))``)
        if (ctx.call_name(up) or "").startswith("torch.") and (ctx.call_name(up) or "").endswith("_like"):
            return True  # ``torch.ones_like(patch)``: its shape and type only
        if _into_host_buffer(ctx, up):
            return True  # ``canvas[..., top:bottom].add_(patch)``: summed into a buffer kept on the host
        if (ctx.call_name(up) or "") in ("torch.cat", "torch.stack", "torch.hstack", "torch.vstack") \
                and isinstance(keeper := sem.parent(up), ast.Call) and up in keeper.args and _keeps(keeper):
            return True  # ``rows.append(torch.cat((z, y), dim=-1))``: joined on the host, then kept
        if as_arrays and _kept_directly(sem, up):
            return True  # ``tiles.append(paint(pred_map=pred))``: what a helper makes of the arrays is kept
        outer = sem.parent(up)  # ``Image.fromarray(image).save(path)``: written out through a wrapper
        if isinstance(outer, ast.Assign) and outer.value is up and all(isinstance(t, ast.Subscript) for t in outer.targets):
            return _host_function(ctx, up)  # ``bank[i:j] = unit_rows(feats)``: stored on the host through a helper
        return isinstance(outer, ast.Attribute) and isinstance(call := sem.parent(outer), ast.Call) \
            and call.func is outer and _saves(call)

    return bool(uses) and all(kept(n) for n in uses)


_METRIC_FUNC = lazy(r"(?i)metric|score|accuracy|(^|_)acc($|_)|iou|confusion|hist|(^|_)eval(uate)?_")


def _a_list(sem, target: ast.AST, at: ast.AST) -> bool:  # type: ignore[no-untyped-def]
    """``target`` is bound to a list (``preds = []``, ``list()``) where ``at`` grows it."""
    b = sem.binding_at(target.id, at) if isinstance(target, ast.Name) else None
    value = b.value if b is not None and not b.is_param else None
    return isinstance(value, ast.List) or isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
        and value.func.id == "list"


def _host_function(ctx: Context, call: ast.Call) -> bool:
    """A metric by its name, a function of this file or of another module of the project (not torch's), or a SciPy
    sparse product: what it is handed as NumPy stays there."""
    name = getattr(call.func, "id", "") or getattr(call.func, "attr", "")
    if (ctx.call_name(call) or "").startswith("scipy."):
        return True  # ``csc_matrix.dot(mask.cpu().numpy(), reducing)``: a sparse product, an array on the host;
        # ``integrate.solve_ivp(f, span, x.cpu().numpy())``: a solver's initial state, which it needs as NumPy
        # (not ``np.mean(dice.cpu().numpy())``: a number, which the copy only served to read)
    return bool(_METRIC_FUNC.search(name)) or (bool(ctx.semantic.resolve(call)) or ctx.semantic.external(call) is not None) \
        and not (ctx.call_name(call) or "").startswith("torch.")  # (``utils.decode(grid.cpu().numpy(), n)``, too)


def _grown_on_host(ctx: Context, seq: ast.AST, outer: ast.AST | None) -> bool:
    """``bank = torch.cat((bank, net(x).cpu()), 0)`` (or ``np.concatenate([bank, out.cpu().numpy()])``): a feature bank
    grown on the host, batch after batch."""
    sem = ctx.semantic
    if not (isinstance(outer, ast.Call) and seq in outer.args and ctx.call_name(outer) in (
            "torch.cat", "torch.stack", "numpy.concatenate", "numpy.vstack", "numpy.hstack", "numpy.append")):
        return False
    stmt = sem.parent(outer)
    name = bound_name(stmt) if isinstance(stmt, ast.Assign) and stmt.value is outer else None
    return name is not None and any(isinstance(e, ast.Name) and e.id == name for e in seq.elts)  # type: ignore[attr-defined]


def _on_host(ctx: Context, call: ast.Call) -> bool:
    """A NumPy function, a tensor made from a host array (``torch.as_tensor(arr)``) or the array serialised
    (``pickle.dumps(row)``, for a key-value store): the value stays on the host."""
    name = ctx.call_name(call) or ""
    return name.startswith("numpy.") or name in ("torch.as_tensor", "torch.from_numpy", "torch.tensor") \
        or name in _SERIALISERS


_SERIALISERS = frozenset({"pickle.dumps", "json.dumps", "msgpack.packb", "marshal.dumps"})
_AS_ARRAY = frozenset({"numpy.asarray", "numpy.array", "numpy.ascontiguousarray"})
_SELECTIONS = frozenset({"numpy.where", "numpy.nonzero", "numpy.argwhere", "numpy.flatnonzero"})
_JOINS = frozenset({"numpy.hstack", "numpy.vstack", "numpy.concatenate", "numpy.stack", "numpy.column_stack",
                    "numpy.dstack"})
_METADATA = frozenset({"shape", "ndim", "dtype", "size"})
_ARRAY_METHODS = frozenset({"flatten", "ravel", "astype", "reshape", "squeeze", "transpose", "copy", "tolist"})


def _record(ctx: Context, call: ast.Call) -> bool:
    """``CodeRow(top=top, bottom=bottom)``: a class named as classes are, not torch's (a namedtuple, a dataclass)."""
    name = getattr(call.func, "id", None) or getattr(call.func, "attr", "")
    return name[:1].isupper() and not (ctx.call_name(call) or "").startswith("torch.")


def _kept_directly(sem: object, n: ast.AST) -> bool:
    """``results.append((k, prob))``, ``probs.append(prob)``: handed to a collector, alone or in a tuple."""
    up = sem.parent(n)  # type: ignore[attr-defined]
    if isinstance(up, (ast.Tuple, ast.List)):
        n, up = up, sem.parent(up)  # type: ignore[attr-defined]
    return isinstance(up, ast.Call) and n in up.args and _keeps(up)


def _written_as_text(ctx: Context, n: ast.AST) -> bool:
    """``n`` is formatted into text (an f-string, ``str()``, ``"%d" % n``, ``"{}".format(n)``) that a write takes
    (``f.write(f"{p}\n")``, ``writer.writerow(...)``)."""
    sem = ctx.semantic
    m, up = n, sem.parent(n)
    while isinstance(up, (ast.FormattedValue, ast.JoinedStr)) or isinstance(up, ast.Call) and m in up.args and (
            isinstance(up.func, ast.Name) and up.func.id == "str" or isinstance(up.func, ast.Attribute)
            and up.func.attr == "format") or isinstance(up, ast.BinOp) and isinstance(up.op, (ast.Mod, ast.Add)):
        m, up = up, sem.parent(up)
    return m is not n and isinstance(up, ast.Call) and m in up.args and _saves(up)


def _element_reads(sem: object, n: ast.AST) -> tuple[str, list[ast.AST]] | None:
    """(the name bound to each element, its reads in the loop) where a for loop walks ``n``, itself or as an
    argument of ``zip()``/``enumerate()`` (``for seed, image in zip(seeds, images):``)."""
    up, it = sem.parent(n), n  # type: ignore[attr-defined]
    position = None
    if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in ("zip", "enumerate") and n in up.args:
        position = up.args.index(n) + (up.func.id == "enumerate")  # type: ignore[arg-type]
        it, up = up, sem.parent(up)  # type: ignore[attr-defined]
    if not isinstance(up, ast.For) or up.iter is not it:
        return None
    target = up.target
    if position is not None:
        target = target.elts[position] if isinstance(target, ast.Tuple) and position < len(target.elts) else None
    if not isinstance(target, ast.Name):
        return None
    return target.id, [r for r in sem.reads_of(target.id) if sem.contains(up, r)]  # type: ignore[attr-defined]




_SAVERS = ("torch.save", "torch_xla.core.xla_model.save", "xm.save", "safetensors.torch.save_file")


def copied_for_a_checkpoint(ctx: Context, node: ast.Call) -> bool:
    """``torch.save(pred.cpu(), fname)``, or ``model_cpu = {k: v.cpu() for k, v in model.state_dict().items()}`` then
    saved (in a dict: ``torch.save({"model_state_dict": model_cpu, ...}, path)``): a checkpoint reads its tensors back
    whatever the program does; the copy is the save's own."""
    sem = ctx.semantic
    names: set[str] = set()
    for up in sem.ancestors(node):
        if isinstance(up, ast.Call) and (ctx.call_name(up) or "") in _SAVERS:
            return True
        if isinstance(up, ast.stmt):
            if isinstance(up, ast.Assign):
                names = {t.id for t in up.targets if isinstance(t, ast.Name)}
            break
    if not names or method_name(node) != "cpu":
        return False
    scope = sem.scope_of(node)
    later = [n for n in sem.local_nodes(scope) if getattr(n, "lineno", 0) > node.lineno]
    for _ in range(2):  # (the copy, then the dict that holds it)
        for n in later:
            if isinstance(n, ast.Call) and (ctx.call_name(n) or "") in _SAVERS and any(
                    isinstance(m, ast.Name) and m.id in names for a in n.args[:1] for m in sem.subtree(a)):
                return True
        names |= {t.id for n in later if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict) and any(
            isinstance(v, ast.Name) and v.id in names for v in n.value.values) for t in n.targets if isinstance(t, ast.Name)}
    return False
