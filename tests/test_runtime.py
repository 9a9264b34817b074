"""The op runtime (``roofkit.ops._runtime``): the direct kernel launch, and the one declaration
that gives an op its eager path, its custom op (with fake) and its autograd."""

import contextlib

import pytest
import torch

import roofkit
from roofkit.ops import _runtime
from roofkit.ops._runtime import Launch, Op, _spec_key


def test_spec_key_separates_what_triton_specializes_on():
    x = torch.empty(64, dtype=torch.float32)
    base = _spec_key((x, 16, 7, 0.5, None, True))
    assert _spec_key((torch.empty(64, dtype=torch.float32), 32, 9, 1.5, None, False)) == base
    assert _spec_key((x[1:], 16, 7, 0.5, None, True)) != base  # 4-byte offset: not 16-byte aligned
    assert _spec_key((x.half(), 16, 7, 0.5, None, True)) != base  # dtype
    assert _spec_key((x, 1, 7, 0.5, None, True)) != base  # == 1 is specialized
    assert _spec_key((x, 17, 7, 0.5, None, True)) != base  # divisibility by 16
    assert _spec_key((x, 16, 2**31, 0.5, None, True)) != base  # 64-bit integer
    assert _spec_key((x, 16, -(2**31) - 1, 0.5, None, True)) != base
    assert _spec_key((x, 16, 7, 0.5, x, True)) != base  # None vs a tensor
    # Unhashable arguments never match a cached key (Triton's own path decides each time).
    assert _spec_key(([1],)) != _spec_key(([1],))


class _FakeCompiled:
    """What Triton's kernel[grid](...) returns: a compiled kernel with a launcher."""

    def __init__(self, log):
        self.log, self.function, self.packed_metadata = log, "fn", "meta"

    def run(self, *args):
        self.log.append(("direct", args))


class _FakeJit:
    """A JITFunction stand-in: records Triton-path launches and returns a compiled kernel."""

    def __init__(self, params):
        self.params, self.log = params, []

    def __getitem__(self, grid):
        def call(*args, **kw):
            self.log.append(("triton", grid, args, kw))
            return _FakeCompiled(self.log)

        return call


class _Param:
    def __init__(self, name, constexpr=False, default=None, has_default=False):
        self.name, self.is_constexpr, self.default, self.has_default = name, constexpr, default, has_default


@pytest.fixture
def fake_jit(monkeypatch):
    monkeypatch.setattr(_runtime, "_JITFunction", _FakeJit)
    monkeypatch.setattr(_runtime, "_hooks_set", lambda: False)
    monkeypatch.setattr(_runtime, "_current_device", lambda: 0)
    monkeypatch.setattr(_runtime, "_raw_stream", lambda device: 1234)
    params = [_Param("x_ptr"), _Param("n"), _Param("BLOCK", True), _Param("FLAG", True, default=False, has_default=True)]
    return _FakeJit(params)


def test_launch_goes_direct_after_the_first_call_of_a_specialization(fake_jit):
    launch = Launch(fake_jit, (3, 2), BLOCK=128, num_warps=4)
    x = torch.empty(8)
    launch(x, 64)
    assert [e[0] for e in fake_jit.log] == ["triton"]
    assert fake_jit.log[0][1] == (3, 2) and fake_jit.log[0][3] == {"BLOCK": 128, "num_warps": 4}
    launch(torch.empty(8), 48)  # same specialization: the compiled kernel, directly
    kind, args = fake_jit.log[-1]
    assert kind == "direct"
    # grid, stream, function, metadata, no hooks, then every parameter in order (constexprs too).
    assert args[:9] == (3, 2, 1, 1234, "fn", "meta", None, None, None)
    assert args[10:] == (48, 128, False)
    launch(torch.empty(8), 1)  # n == 1 compiles differently: Triton's path again
    assert fake_jit.log[-1][0] == "triton"
    launch(torch.empty(8)[1:], 48)  # misaligned pointer: Triton's path
    assert fake_jit.log[-1][0] == "triton"
    assert sum(e[0] == "triton" for e in fake_jit.log) == 3


def test_launch_keeps_triton_path_when_a_runtime_parameter_follows(fake_jit):
    # A runtime parameter after the ones passed (it would need its value): never direct.
    fake_jit.params = [_Param("x_ptr"), _Param("BLOCK", True), _Param("n")]
    launch = Launch(fake_jit, 4, BLOCK=64)
    for _ in range(3):
        launch(torch.empty(4))
    assert [e[0] for e in fake_jit.log] == ["triton"] * 3


def test_launch_uses_triton_path_while_profiler_hooks_are_set(fake_jit, monkeypatch):
    launch = Launch(fake_jit, 1, BLOCK=64)
    launch(torch.empty(4), 16)
    monkeypatch.setattr(_runtime, "_hooks_set", lambda: True)
    launch(torch.empty(4), 16)
    assert [e[0] for e in fake_jit.log] == ["triton", "triton"]


def test_hooks_set_reads_triton_hook_chains():
    from triton import knobs

    assert _runtime._hooks_set() is False

    def hook(*args):
        pass

    chain = knobs.runtime.launch_enter_hook
    if not hasattr(chain, "add"):
        pytest.skip("this Triton keeps a single hook, not a chain")
    chain.add(hook)
    try:
        assert _runtime._hooks_set() is True
    finally:
        chain.remove(hook)


def _double(x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    _double.calls += 1
    return x * 2 * scale, x.sum().reshape(1)


_double.calls = 0


def _double_fake(x, scale):
    return torch.empty_like(x), x.new_empty((1,))


def _double_setup(ctx, inputs, output):
    ctx.scale = inputs[1]
    ctx.mark_non_differentiable(output[1])


def _double_backward(ctx, gy, gs):
    return gy * 2 * ctx.scale, None


_DOUBLE = Op("roofkit_test::double", _double, _double_fake).autograd(_double_setup, _double_backward)


def test_op_eager_call_runs_the_launcher_without_the_dispatcher():
    calls = _double.calls
    y, s = _DOUBLE(torch.ones(3), 1.5)
    assert torch.equal(y, torch.full((3,), 3.0)) and _double.calls == calls + 1
    x = torch.ones(3, requires_grad=True)
    y, _ = _DOUBLE.apply(x, 1.5)
    assert y.grad_fn is not None and "double_function" in type(y.grad_fn).__name__
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))
    with torch.no_grad():
        y, _ = _DOUBLE.apply(x, 1.5)
    assert y.grad_fn is None


def test_op_under_fake_tensor_mode_uses_the_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls = _double.calls
    with FakeTensorMode():
        y, s = _DOUBLE(torch.empty(5), 2.0)
        assert y.shape == (5,) and s.shape == (1,)
    assert _double.calls == calls  # the launcher never saw a fake tensor


def test_op_compiles_fullgraph_with_its_autograd():
    x = torch.randn(4, requires_grad=True)

    def f(t):
        y, _ = _DOUBLE.apply(t, 0.5)
        return y.sum()

    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    g(x).backward()
    torch.testing.assert_close(x.grad, torch.ones(4))


def test_op_sets_the_first_cuda_arguments_device(monkeypatch):
    entered = []

    @contextlib.contextmanager
    def fake_device(dev):
        entered.append(dev)
        yield

    class OnCuda1(torch.Tensor):
        @property
        def is_cuda(self):
            return True

        @property
        def device(self):
            return torch.device("cuda", 1)

        def get_device(self):
            return 1

    monkeypatch.setattr(_runtime, "_current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", fake_device)
    ran = []
    on1 = torch.zeros(2).as_subclass(OnCuda1)
    assert _runtime._call_on_device(lambda *a: ran.append(1) or "ok", (on1, 3)) == "ok"
    assert entered == [torch.device("cuda", 1)] and ran == [1]
    monkeypatch.setattr(_runtime, "_current_device", lambda: 1)
    _runtime._call_on_device(lambda *a: None, (on1,))
    assert len(entered) == 1  # already current
    _runtime._call_on_device(lambda *a: None, (torch.zeros(2),))
    assert len(entered) == 1  # CPU tensors: nothing


def test_public_ops_run_their_kernels_through_the_runtime():
    # Every custom op of roofkit is declared through an Op (one declaration: eager path, custom op
    # with fake, autograd) or, for the modules not yet moved onto it, guarded by on_input_device.
    import importlib
    import pkgutil

    import roofkit.ops as ops

    ops_found = []
    for info in pkgutil.walk_packages(ops.__path__, "roofkit.ops."):
        module = importlib.import_module(info.name)
        ops_found += [v for v in vars(module).values() if isinstance(v, Op)]
    names = {op.name for op in ops_found}
    for public in ("rms_norm", "matmul", "linear", "scaled_dot_product_attention"):
        fn = getattr(roofkit, public)
        # The only wrapper left is the plan's (``planned``), over the function itself.
        inner = fn.__wrapped__ if isinstance(getattr(fn, "plans", None), _runtime.Plans) else fn
        assert getattr(inner, "__wrapped__", None) is None, f"roofkit.{public} still carries the old wrapper"
    assert {"roofkit::rms_norm_fwd", "roofkit::rms_norm_bwd", "roofkit::matmul", "roofkit::linear",
            "roofkit::attention_fwd", "roofkit::attention_bwd"} <= names


def test_double_backward_raises_instead_of_dropping_terms():
    # The ops are first order: a gradient penalty through them must fail loudly, never return
    # gradients without their second-order terms.
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    y = roofkit.rms_norm(x, (8,), w)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(y.square().sum(), (x,), create_graph=True)
    t = torch.ones(3, requires_grad=True)
    y, _ = _DOUBLE.apply(t, 1.0)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(y.square().sum(), (t,), create_graph=True)
    (g,) = torch.autograd.grad(_DOUBLE.apply(t, 1.0)[0].square().sum(), (t,))  # first order still works
    assert torch.equal(g, torch.full((3,), 8.0))


def test_negated_views_and_subclass_arguments_go_through_the_dispatcher():
    # A lazily negated view shares memory with its base: a kernel reading the memory directly
    # would see the base. A subclass in any position (not only the first) must reach the custom op.
    x = torch.randn(4, 16)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    torch.testing.assert_close(roofkit.softmax(neg, -1), torch.softmax(-x, -1))
    torch.testing.assert_close(roofkit.rms_norm(neg, (16,)), torch.nn.functional.rms_norm(-x, (16,)))
    assert not _runtime._direct((torch.ones(2), torch.ones(2).as_subclass(_Sub)))
    assert not _runtime._direct((torch.ones(2), neg))
    assert _runtime._direct((torch.ones(2), 3, None))


class _Sub(torch.Tensor):
    pass


def test_vmap_goes_through_the_custom_op():
    x = torch.randn(3, 4, 8)
    got = torch.func.vmap(lambda t: roofkit.softmax(t, -1))(x)
    torch.testing.assert_close(got, torch.softmax(x, -1))


def test_forward_mode_ad_is_refused_not_silently_dropped():
    # A dual tensor does not require grad: without the check the op would run on the primal and
    # the tangent would vanish (torch.func.jvp would return zeros).
    import roofkit

    g, u = torch.randn(3, 5), torch.randn(3, 5)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(g, torch.ones_like(g))
        for call in (lambda: roofkit.swiglu(dual, u), lambda: roofkit.softmax(dual, -1)):
            with pytest.raises(NotImplementedError, match=r"forward-mode AD .* is not supported"):
                call()
        assert roofkit.swiglu(g, u).shape == g.shape  # plain tensors inside the level still run
    with pytest.raises(NotImplementedError, match=r"roofkit \(glu_fwd\): forward-mode AD"):
        torch.func.jvp(lambda a: roofkit.swiglu(a, u), (g,), (torch.ones_like(g),))


def test_ops_called_by_name_refuse_double_backward():
    import roofkit.ops  # noqa: F401 (registers the custom ops)

    g, u = torch.randn(5, requires_grad=True), torch.randn(5)
    y = torch.ops.roofkit.glu_fwd(g, u, 0).sum()
    (dg,) = torch.autograd.grad(y, g, create_graph=False, retain_graph=True)
    assert dg.shape == g.shape
    with pytest.raises(RuntimeError, match=r"roofkit \(glu_fwd\): double backward is not supported"):
        torch.autograd.grad(y, g, create_graph=True)
