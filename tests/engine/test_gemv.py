"""gemv.c, the small-M float32 kernel of the decode linears: agrees with F.linear to float rounding (tiles of
three rows and their one/two-row remainders, a weight row count not a multiple of the 4-row tile, a K with a
tail past the 16-float body, bias), refuses what it cannot take, and PackedLinear routes only few-row inputs to it (up to its calibrated `kernel_rows`,
measured once per process per shape); its int8-weight form agrees with F.linear on the dequantised weight and
Int8Linear routes only few-row inputs to it."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.cpu_kernels import GEMV_MAX_ROWS, gemv, gemv_int8, load_library
from engine.layers.linear import CALIBRATION_ROWS, PackedLinear, calibrate_kernel_rows, pack_linear_weights
from engine.layers.quant import Int8Linear, quantize_per_channel


@pytest.fixture(scope="module")
def lib():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the engine runs the torch path")
    built = load_library()
    assert built is not None  # a compiler is here: a failed build must not pass as "no compiler"
    return built


@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 64), (2, 37, 40), (3, 8, 576), (5, 70, 23), (13, 96, 1536)])
def test_gemv_matches_f_linear(lib, m: int, n: int, k: int) -> None:
    torch.manual_seed(m * n + k)
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    torch.testing.assert_close(gemv(lib, x, w), F.linear(x, w), rtol=1e-5, atol=1e-4)
    out = torch.full((m, n), float("nan"))
    assert gemv(lib, x, w, b, out=out) is out
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-4)


def test_gemv_refuses_inputs_it_cannot_take(lib) -> None:
    """The C side trusts every size and layout: a mismatch is a ValueError in Python, never a bad read."""
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    for args in ((x, torch.randn(4, 9)),  # K differs
                 (x, w.t().contiguous().t()),  # weight not contiguous
                 (x.double(), w.double()),  # not float32
                 (x, w, torch.randn(5))):  # bias of another length
        with pytest.raises(ValueError):
            gemv(lib, *args)
    with pytest.raises(ValueError):
        gemv(lib, x, w, out=torch.empty(2, 5))


@torch.inference_mode()
def test_packed_linear_uses_the_kernel_for_few_rows_only(lib) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(40, 24)
    layer = PackedLinear(linear, pack=False, kernel=lib)
    for rows in (1, GEMV_MAX_ROWS, GEMV_MAX_ROWS + 1):
        x = torch.randn(rows, 40)
        torch.testing.assert_close(layer(x), linear(x), rtol=1e-5, atol=1e-5)
    # a kernel result is bitwise the kernel's, a larger batch bitwise MKL's: the routing itself is observable
    few, many = torch.randn(2, 40), torch.randn(GEMV_MAX_ROWS + 1, 40)
    assert torch.equal(layer(few), gemv(lib, few, linear.weight, linear.bias))
    assert not torch.equal(layer(few), F.linear(few, linear.weight, linear.bias))  # the two sum orders differ
    assert torch.equal(layer(many), F.linear(many, linear.weight, linear.bias))


@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 64), (2, 37, 40), (3, 8, 576), (5, 70, 23), (12, 96, 1536)])
def test_gemv_int8_matches_dequantised_f_linear(lib, m: int, n: int, k: int) -> None:
    torch.manual_seed(m * n + k)
    x, b = torch.randn(m, k), torch.randn(n)
    q, scale = quantize_per_channel(torch.randn(n, k))
    dequantised = q.float() * scale[:, None]
    torch.testing.assert_close(gemv_int8(lib, x, q, scale), F.linear(x, dequantised), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gemv_int8(lib, x, q, scale, b), F.linear(x, dequantised, b), rtol=1e-5, atol=1e-4)


def test_gemv_int8_refuses_inputs_it_cannot_take(lib) -> None:
    x = torch.randn(2, 8)
    q, scale = quantize_per_channel(torch.randn(4, 8))
    for args in ((x, q[:, :7].contiguous(), scale),  # K differs
                 (x, q.float(), scale),  # weight not int8
                 (x, q.t().contiguous().t(), scale),  # weight not contiguous
                 (x.double(), q, scale),  # x not float32
                 (x, q, scale[:3]),  # scale of another length
                 (x, q, scale, torch.randn(5))):  # bias of another length
        with pytest.raises(ValueError):
            gemv_int8(lib, *args)


@torch.inference_mode()
def test_int8_linear_uses_the_kernel_for_few_rows_only(lib) -> None:
    torch.manual_seed(0)
    layer = Int8Linear(nn.Linear(40, 24))
    assert layer.attach_kernel(lib)
    dequantised = layer.dequantize()
    for rows in (1, GEMV_MAX_ROWS):  # float activations: the dequantised weight times x, to float rounding
        x = torch.randn(rows, 40)
        torch.testing.assert_close(layer(x), F.linear(x, dequantised, layer.bias), rtol=1e-5, atol=1e-5)
    # more rows: fbgemm's path (activations rounded to int8), bitwise what it gives without the kernel
    many = torch.randn(GEMV_MAX_ROWS + 1, 40)
    fbgemm = layer(many)
    layer._kernel = None
    assert torch.equal(fbgemm, layer(many))
    assert not torch.equal(fbgemm, F.linear(many, dequantised, layer.bias))


@torch.inference_mode()
def test_kernel_rows_route_each_layer(lib) -> None:
    """A layer's `kernel_rows` (set by calibration) is where the kernel stops and the other path starts."""
    torch.manual_seed(1)
    linear = nn.Linear(40, 24)
    layer = PackedLinear(linear, pack=False, kernel=lib)
    layer.kernel_rows = 2
    two, three = torch.randn(2, 40), torch.randn(3, 40)
    assert torch.equal(layer(two), gemv(lib, two, linear.weight, linear.bias))
    assert torch.equal(layer(three), F.linear(three, linear.weight, linear.bias))


@torch.inference_mode()
def test_calibration_sets_a_crossover_per_shape_once_per_process(lib, monkeypatch) -> None:
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN: packed layers cannot be built")
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64), nn.Linear(64, 256))
    assert pack_linear_weights(model, pack=True, kernel=lib) == 3
    rows = calibrate_kernel_rows(model)
    assert set(rows) == {(256, 64), (64, 256)}
    assert all(r in (1, *CALIBRATION_ROWS) for r in rows.values())
    for layer in model:
        assert layer.kernel_rows == rows[(layer.out_features, layer.in_features)]
        for m in (layer.kernel_rows, layer.kernel_rows + 1):  # either path, the same product to float rounding
            x = torch.randn(m, layer.in_features)
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-4)
    # the same shapes and threads again (another engine in this process): no second measurement
    monkeypatch.setattr("engine.layers.linear._measure_crossover", lambda *a: pytest.fail("measured twice"))
    other = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    pack_linear_weights(other, pack=True, kernel=lib)
    assert calibrate_kernel_rows(other) == rows
    assert [layer.kernel_rows for layer in other] == [rows[(256, 64)], rows[(64, 256)]]
    assert calibrate_kernel_rows(nn.Sequential(nn.ReLU())) == {}  # no layer with both paths: nothing to measure
