"""A whole log: one finding per error, in order, repeats merged, located at the user's line."""

from __future__ import annotations

import os

from torchdoctor.explain import explain_text

AMP = ("/home/ana/proj/train.py:31: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` instead.\n"
       "  with torch.cuda.amp.autocast():\n")
OOM = ('Traceback (most recent call last):\n  File "/home/ana/proj/train.py", line 58, in <module>\n    loss.backward()\n'
       '  File "/usr/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward\n    torch.autograd.backward(\n'
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 19.62 MiB is free. "
       "Including non-PyTorch memory, this process has 79.13 GiB memory in use. Of the allocated memory 78.45 GiB is allocated by PyTorch, and 120.50 MiB "
       "is reserved by PyTorch but unallocated.\n")
MISMATCH = ('Traceback (most recent call last):\n  File "/home/ana/proj/eval.py", line 12, in <module>\n    main()\n'
            '  File "/home/ana/proj/eval.py", line 9, in main\n    logits = model(images)\n'
            '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl\n    return self._call_impl(*args, **kwargs)\n'
            "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same\n")


def test_a_log_with_three_errors_gives_three_findings_in_order_at_the_users_lines():
    found = explain_text("epoch 1/3 ...\n" + AMP + "step 10 loss=2.3\n" + OOM + "\n--- rerun of the evaluation ---\n" + MISMATCH)
    assert [f.code for f in found] == ["TD601", "TD610", "TD302"]
    assert [(f.location.path, f.location.line) for f in found] == [
        ("/home/ana/proj/train.py", 31), ("/home/ana/proj/train.py", 58), ("/home/ana/proj/eval.py", 9)]
    assert "`logits = model(images)`" in found[2].message  # the innermost user frame, not main() and not torch


def test_every_rank_printing_the_same_error_is_one_finding():
    rank = "[rank{r}]: RuntimeError: ValueError: sampler option is mutually exclusive with shuffle\n"
    found = explain_text("".join(rank.format(r=r) for r in range(8)))
    assert [f.code for f in found] == ["TD702"]


def test_a_warning_repeated_after_another_error_is_not_reported_twice():
    assert [f.code for f in explain_text(AMP + OOM + AMP)] == ["TD601", "TD610"]


def test_a_device_side_assert_printed_by_many_threads_is_one_finding():
    line = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [{t},0,0] "
            "Assertion `t >= 0 && t < n_classes` failed.\n")
    text = "".join(line.format(t=t) for t in range(64)) + "RuntimeError: CUDA error: device-side assert triggered\n"
    [f] = explain_text(text)
    assert f.code == "TD307" and "nll_loss_forward_reduce_cuda_kernel_2d" in f.message


def test_two_different_errors_of_one_family_stay_two_findings():
    a = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when checking argument for argument target in method wrapper_CUDA_nll_loss_forward)\n"
    b = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)\n"
    assert [f.code for f in explain_text(a + b)] == ["TD302", "TD201"]


def test_a_message_nobody_knows_gives_nothing_and_no_guess():
    assert explain_text("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)") == []
    assert explain_text("") == []
    assert explain_text("\n\n   \n") == []


def test_code_shown_in_a_traceback_is_not_taken_for_output():
    text = ('Traceback (most recent call last):\n  File "/home/ana/proj/train.py", line 3, in <module>\n'
            '    print("CUDA out of memory. Tried to allocate 1.00 GiB")\nKeyError: 3\n')
    assert explain_text(text) == []


def test_colour_codes_and_windows_line_ends_do_not_hide_a_message():
    text = "\x1b[31mRuntimeError\x1b[0m: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\r\n"
    assert [f.code for f in explain_text(text)] == ["TD303"]


def test_a_chained_error_gives_a_finding_for_each_known_part():
    text = (MISMATCH + "\nDuring handling of the above exception, another exception occurred:\n\n"
            + 'Traceback (most recent call last):\n  File "/home/ana/proj/eval.py", line 14, in <module>\n    print(out.numpy())\n'
            + "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.\n")
    found = explain_text(text)
    assert [(f.code, f.location.line) for f in found] == [("TD302", 9), ("TD501", 14)]
    assert "`out`" in found[1].message


def test_paths_under_the_current_folder_are_shown_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = os.path.join(str(tmp_path), "train.py")
    text = f'Traceback (most recent call last):\n  File "{script}", line 7, in <module>\n    x.numpy()\nRuntimeError: Can\'t call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.\n'
    [f] = explain_text(text)
    assert (f.location.path, f.location.line) == ("train.py", 7)
