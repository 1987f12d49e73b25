"""The inference fast path for linear layers: same numbers as F.linear, never a stale weight, and no
effect on training (grad mode takes the module's own forward)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.backends.torch import packed_linear

pytestmark = pytest.mark.skipif(
    not packed_linear.available(), reason="oneDNN packed linear not in this torch"
)


def test_inference_matches_f_linear_and_follows_in_place_updates():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32, bias=False))
    assert packed_linear.install(model) == 2
    assert packed_linear.install(model) == 0  # idempotent
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    for rows in (1, 5, 40):
        x = torch.randn(rows, 64)
        with torch.inference_mode():
            fast = model(x)
        with torch.no_grad():  # not inference mode: the module's own forward
            ref = model[2](torch.relu(F.linear(x, model[0].weight, model[0].bias)))
        torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
        # training through the same modules: autograd works and the optimizer updates in place
        model(torch.randn(8, 64)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        with torch.inference_mode():
            after = model(x)
        with torch.no_grad():
            expected = model[2](torch.relu(F.linear(x, model[0].weight, model[0].bias)))
        assert not torch.allclose(after, fast)
        torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-5)


def test_uninstall_restores_the_modules_own_forward():
    lin = torch.nn.Linear(8, 4)
    assert packed_linear.install(lin) == 1 and "forward" in vars(lin)
    assert packed_linear.uninstall(lin) == 1 and "forward" not in vars(lin)
    assert packed_linear.install(lin) == 1  # and it can be installed again


def test_other_dtypes_keep_their_forward():
    lin = torch.nn.Linear(8, 4).to(torch.bfloat16)
    assert packed_linear.install(lin) == 0
