"""Plans (roofkit.ops._runtime): a repeated eager call replays what the first call with its key
did. On CPU they are off unless ``CPU_PLANS`` is set, as here (the kernels run through the
interpreter); on a GPU every test exercises them."""

import pytest
import torch

import roofkit
from roofkit.harness import registry
from roofkit.harness.verify import verify_op
from roofkit.ops import _runtime
from roofkit.ops._runtime import Plan, Unplanned


@pytest.fixture(autouse=True)
def plans_on_cpu():
    _runtime.clear_plans()
    old = _runtime.CPU_PLANS[0], _runtime.PLANS[0]
    _runtime.CPU_PLANS[0], _runtime.PLANS[0] = True, True
    yield
    _runtime.CPU_PLANS[0], _runtime.PLANS[0] = old
    _runtime.clear_plans()


def _unplanned(fn, *args, **kwargs):
    _runtime.PLANS[0] = False
    try:
        return fn(*args, **kwargs)
    finally:
        _runtime.PLANS[0] = True


def _only_plan(fn):
    kept = list(fn.plans.values())
    assert len(kept) == 1, kept
    return kept[0]


_CALLS = {
    "softmax": lambda g: ((torch.randn(5, 33, generator=g),), {}),
    "log_softmax": lambda g: ((torch.randn(33, 6, generator=g).t(), 0), {}),
    "layer_norm": lambda g: ((torch.randn(2, 3, 40, generator=g), (40,), torch.randn(40, generator=g),
                              torch.randn(40, generator=g)), {"eps": 1e-4}),
    "sum": lambda g: ((torch.randn(4, 5, 6, generator=g),), {"dim": (0, 2), "keepdim": True}),
    "mean": lambda g: ((torch.randn(7, 9, generator=g), -1), {}),
    "amax": lambda g: ((torch.randn(7, 9, generator=g), 0), {}),
    "transpose": lambda g: ((torch.randn(6, 10, generator=g), 0, 1), {}),
    "matmul": lambda g: ((torch.randn(9, 24, generator=g), torch.randn(24, 10, generator=g)),
                         {"bias": torch.randn(10, generator=g), "activation": "relu"}),
    "linear": lambda g: ((torch.randn(3, 24, generator=g), torch.randn(16, 24, generator=g)), {}),
    "scaled_dot_product_attention": lambda g: (
        (torch.randn(1, 4, 5, 16, generator=g), torch.randn(1, 2, 7, 16, generator=g),
         torch.randn(1, 2, 7, 16, generator=g)), {"enable_gqa": True}),
    "quantize": lambda g: ((torch.randn(8, 32, generator=g),), {"axis": 0}),
    "cross_entropy": lambda g: ((torch.randn(6, 40, generator=g), torch.randint(0, 40, (6,), generator=g)),
                                {"label_smoothing": 0.1}),
    # (its output dtype comes from torch.promote_types, which reaches the dispatcher)
    "rope": lambda g: ((torch.randn(1, 1, 4, 16, generator=g).transpose(1, 2), torch.randn(1, 1, 2, 16, generator=g)
                        .transpose(1, 2), torch.randn(1, 1, 16, generator=g), torch.randn(1, 1, 16, generator=g)), {}),
    "swiglu": lambda g: ((torch.randn(3, 40, generator=g), torch.randn(3, 40, generator=g)), {}),
}


def _to(device, tree):
    return torch.utils._pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, tree)


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_replay_matches_the_call_on_new_values(name, device):
    # The first call records; the next ones replay on other values of the same key and must give
    # what the op, unplanned, gives on those values (bit for bit: the same kernels run).
    fn = getattr(roofkit, name)
    for seed in range(3):  # the first call runs as written, the second records, the third replays
        args, kwargs = _to(device, _CALLS[name](torch.Generator().manual_seed(seed)))
        got = fn(*args, **kwargs)
        want = _unplanned(fn, *args, **kwargs)
        for g, w in zip(*(torch.utils._pytree.tree_leaves(o) for o in (got, want))):
            assert torch.equal(g, w), (name, seed)
    plan = _only_plan(fn)
    if name == "cross_entropy" and device.type == "cpu":
        # Under the interpreter the targets are checked on the host (GPU: flagged on the device).
        assert isinstance(plan, Unplanned) and "host" in plan.why, plan
    else:
        assert isinstance(plan, Plan), plan
        # every op the public call made is replayed through its own plan (none runs as written)
        assert "(unplanned)" not in plan.describe(), plan.describe()


def test_registry_cases_pass_through_plans(device):
    # verify_op calls each op repeatedly on fresh, poisoned inputs: with plans on, every call after
    # a case's first is a replay, checked against the float64 reference like any other.
    for name, cases in [("layer_norm", ["odd_3x7", "transposed_16x33", "empty_rows_0x7"]),
                        ("softmax", ["odd_3x7"]), ("sum", ["full_781"])]:
        spec = registry.get(name)
        report = verify_op(spec, cases=[c for c in cases if any(k.name == c for k in spec.cases)], seeds=2,
                           dtypes=(torch.float32,), device=device)
        assert report.passed, report.summary()
        assert any(isinstance(p, Plan) for p in spec.impl.plans.values()), name


def test_forward_and_backward_replay(device):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(40, generator=g).to(device)
    b = torch.randn(40, generator=g).to(device).requires_grad_()
    grads = []
    for planned in (True, True, True, False):
        x = torch.randn(6, 40, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
        _runtime.PLANS[0] = planned
        y = roofkit.layer_norm(x, (40,), w, b)
        y.backward(torch.randn(6, 40, generator=torch.Generator().manual_seed(2)).to(device))
        grads.append((y.detach(), x.grad, b.grad.clone()))
        b.grad = None
    _runtime.PLANS[0] = True
    assert isinstance(_only_plan(roofkit.layer_norm), Plan)
    for got in grads[:3]:
        for a, e in zip(got, grads[3]):
            assert torch.equal(a, e)


def test_key_holds_everything_the_call_depends_on(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 24, generator=g).to(device)
    w = torch.randn(24, generator=g).to(device)
    calls = [
        ((x, (24,), w), {}),
        ((x, (24,), w), {"eps": 1e-2}),  # a scalar's value
        ((x, (24,), w), {"eps": 1}),  # its type (int 1 and float 1.0 are equal keys otherwise)
        ((x.double().float().t().contiguous().t(), (24,), w), {}),  # strides
        ((x[:, :23], (23,), w[:23]), {}),  # shape
        ((x.half(), (24,), w.half()), {}),  # dtype
        ((x.reshape(-1)[2:94].view(4, 23)[:, :22], (22,), w[:22]), {}),  # alignment (a 8-byte offset)
    ]
    for args, kwargs in calls * 3:  # each key: as written, recorded, replayed
        assert torch.equal(roofkit.layer_norm(*args, **kwargs), _unplanned(roofkit.layer_norm, *args, **kwargs))
    assert len(roofkit.layer_norm.plans) == len(calls)
    assert all(isinstance(p, Plan) for p in roofkit.layer_norm.plans.values())


def test_a_call_that_reads_values_on_the_host_is_not_planned(device):
    reads = []

    @_runtime.planned
    def reads_item(x):
        reads.append(float(x.sum()))
        return x * 2

    @_runtime.planned
    def reads_tolist(x):
        reads.append(x.tolist())
        return x + 1

    x = torch.randn(3, device=device)
    for fn in (reads_item, reads_tolist):
        for _ in range(3):
            fn(x)
        plan = _only_plan(fn)
        assert isinstance(plan, Unplanned) and "host" in plan.why, plan
    assert len(reads) == 6  # every call ran the function
    assert torch.Tensor.tolist.__name__ == "tolist" and not hasattr(torch.Tensor.tolist, "__wrapped__")


def test_errors_are_raised_on_every_call_and_plans_do_not_hide_them(device):
    x = torch.randn(4, 8, device=device)
    for _ in range(3):
        with pytest.raises(TypeError, match="weight dtype"):
            roofkit.layer_norm(x, (8,), torch.randn(8, device=device).half())
    assert all(not isinstance(p, Plan) for p in roofkit.layer_norm.plans.values())
    roofkit.layer_norm(x, (8,), torch.randn(8, device=device))
    with pytest.raises(ValueError, match="normalized_shape"):
        roofkit.layer_norm(x, (4,), torch.randn(4, device=device))


def test_replays_return_fresh_outputs(device):
    x = torch.randn(5, 16, device=device)
    roofkit.softmax(x)
    y1 = roofkit.softmax(x)  # recorded
    y2 = roofkit.softmax(x)  # replayed
    assert y1 is not y2 and y1.data_ptr() != y2.data_ptr() and torch.equal(y1, y2)
    y2.fill_(0)
    assert not torch.equal(y1, y2)


def test_plans_stand_aside_for_transforms_and_tracing():
    x = torch.randn(3, 8)
    assert _runtime.plan_key((x,)) is not None
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        assert _runtime.plan_key((torch.empty(3, 8),)) is None
    with torch.autograd.forward_ad.dual_level():
        pass
    assert _runtime.plan_key((x.conj(),)) is not None  # a real tensor's conj is itself
    assert _runtime.plan_key((torch.randn(3, 8, dtype=torch.complex64).conj(),)) is None
    assert _runtime.plan_key((x.to_sparse(),)) is None
    assert _runtime.plan_key((x, [x])) is None  # a tensor inside a list
    _runtime.CPU_PLANS[0] = False
    assert _runtime.plan_key((x,)) is None  # CPU calls are planned in tests only
    if torch.cuda.is_available():
        c = x.cuda()
        assert _runtime.plan_key((c,)) is not None
        assert _runtime.plan_key((c, x)) is None  # two devices
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            c.mul(2)  # warm-up on the side stream
            with torch.cuda.graph(graph, stream=stream):
                assert _runtime.plan_key((c,)) is None  # captured calls take the op's own path


def test_epoch_and_clear_drop_plans(device):
    x = torch.randn(5, 16, device=device)
    roofkit.softmax(x)
    roofkit.softmax(x)
    key = next(iter(roofkit.softmax.plans))
    assert isinstance(roofkit.softmax.plans[key], Plan)
    _runtime.bump_epoch()  # (a configuration override, tuning): every plan goes
    assert len(roofkit.softmax.plans) == 0
    roofkit.softmax(x)
    assert len(roofkit.softmax.plans) == 1 and key not in roofkit.softmax.plans  # the epoch is in the key
    _runtime.clear_plans()
    assert len(roofkit.softmax.plans) == 0


def test_ops_that_write_their_arguments_keep_no_op_plans():
    from roofkit.ops._runtime import Op
    import importlib
    import pkgutil
    import roofkit.ops as ops
    found = []
    for info in pkgutil.walk_packages(ops.__path__, "roofkit.ops."):
        found += [v for v in vars(importlib.import_module(info.name)).values() if isinstance(v, Op)]
    mutating = [o for o in found if o._mutated]
    assert mutating and all(o.plans is None for o in mutating)
    assert all(o.plans is not None for o in found if not o._mutated)


def test_a_key_seen_once_is_not_recorded(device, monkeypatch):
    # Shapes that never repeat (a growing KV cache) must not pay for a recording per call.
    recorded = []
    record = _runtime._record
    monkeypatch.setattr(_runtime, "_record", lambda *a: recorded.append(1) or record(*a))
    for n in range(3, 7):
        roofkit.softmax(torch.randn(2, n, device=device))
    assert not recorded and all(p is _runtime._SEEN for p in roofkit.softmax.plans.values())
    roofkit.softmax(torch.randn(2, 6, device=device))
    kept = [p for p in roofkit.softmax.plans.values() if p is not _runtime._SEEN]
    assert recorded == [1, 1] and len(kept) == 1 and isinstance(kept[0], Plan)  # the call and its op


def test_a_call_with_aliased_arguments_is_not_recorded_and_replays_stay_right(device):
    # layer_norm(x, shape, w, w) first: recording it would tie the bias to the weight's slot.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, generator=g).to(device)
    w, b = (torch.randn(32, generator=g).to(device) for _ in range(2))
    for _ in range(3):
        roofkit.layer_norm(x, (32,), w, w)
    assert all(p is _runtime._SEEN for p in roofkit.layer_norm.plans.values())
    for _ in range(3):  # distinct arguments: recorded, replayed, and right
        assert torch.equal(roofkit.layer_norm(x, (32,), w, b), _unplanned(roofkit.layer_norm, x, (32,), w, b))
    assert isinstance(_only_plan(roofkit.layer_norm), Plan)
    # and the plan replayed on aliased arguments reads each from its own position
    assert torch.equal(roofkit.layer_norm(x, (32,), w, w), _unplanned(roofkit.layer_norm, x, (32,), w, w))


def test_the_same_empty_tensor_twice_is_not_recorded(device):
    # Empty tensors have no memory to compare: identity must still count as aliasing.
    def mk():
        return torch.empty(0, 8, device=device, requires_grad=True)

    for _ in range(3):
        x = mk()
        roofkit.swiglu(x, x)
    a, b = mk(), mk()
    y = roofkit.swiglu(a, b)
    ga, gb = torch.autograd.grad(y, [a, b], torch.zeros_like(y))
    assert ga.shape == gb.shape == (0, 8)


def test_plans_keep_no_argument_alive(device):
    import gc
    import weakref

    refs = []
    for _ in range(3):
        a, b = torch.randn(16, 32, device=device), torch.randn(32, 16, device=device)
        roofkit.matmul(a, b)
        roofkit.scaled_dot_product_attention(*(torch.randn(1, 2, 5, 16, device=device) for _ in range(3)))
        refs.append(weakref.ref(a))
        del a, b
    gc.collect()
    assert isinstance(_only_plan(roofkit.matmul), Plan)
    assert all(r() is None for r in refs)


def test_user_level_effects_replay_as_written(device):
    # What a planned function does around roofkit's ops: detach, no_grad blocks, tensors made
    # from Python data, generators, and the gradient branch of an intermediate tensor.
    x = torch.randn(4, 16, device=device, requires_grad=True)

    @_runtime.planned
    def detached(x):
        return roofkit.softmax(x * 2).detach()

    @_runtime.planned
    def no_grad_inside(x):
        with torch.no_grad():
            s = x * 2
        return roofkit.softmax(s + x)

    @_runtime.planned
    def from_data(x):
        t = torch.tensor([0.0, 1.0], device=x.device)
        return roofkit.softmax(x[:, :2] + t)

    for _ in range(4):
        assert not detached(x).requires_grad
        y = no_grad_inside(x)
        (g,) = torch.autograd.grad(y.sum(), x)
        (g_ref,) = torch.autograd.grad(_unplanned(no_grad_inside, x).sum(), x)
        assert torch.equal(g, g_ref)
        assert from_data(x) is not from_data(x)
    assert isinstance(_only_plan(from_data), Unplanned)
    # softmax's own plan existed before these were recorded: they hold it as a step (a replay
    # inside a recording would hide its launches from the recorder)
    for fn in (detached, no_grad_inside):
        plan = _only_plan(fn)
        assert isinstance(plan, Plan) and "op roofkit::softmax_fwd" in plan.describe(), plan

    w = torch.randn(16, 16, device=device)

    @_runtime.planned
    def through_weight(x):
        return roofkit.softmax(x @ w)

    xd = x.detach()
    for _ in range(3):
        through_weight(xd)
    w.requires_grad_(True)
    through_weight(xd).sum().backward()  # the intermediate now needs a gradient: autograd runs
    assert w.grad is not None


def test_recording_and_replay_keep_no_temporary_alive_longer_than_the_call_as_written():
    """A chunk loop's temporaries (linear_cross_entropy's logits) die at their last use both while
    a call is recorded and in its replay: a plan never holds a call's intermediates to its end."""
    import weakref

    alive = []

    @_runtime.planned
    def chunked(x):
        out = torch.empty_like(x)
        for i in range(3):
            t = x * float(i + 1)  # a temporary per chunk
            seen = weakref.ref(t)
            out[i] = t[i]
            del t
            alive.append(seen() is not None)
        return out

    x = torch.randn(3, 5)
    for _ in range(3):  # as written, recorded, replayed
        torch.testing.assert_close(chunked(x), x * torch.tensor([1.0, 2.0, 3.0])[:, None])
    assert alive == [False] * 6  # the replay runs no Python: its frees are checked below
    plan = _only_plan(chunked)
    assert isinstance(plan, Plan) and plan.sched is not None, plan
    freed = [i for _, free in plan.sched for i in free]
    muls = [k for k, (what, _) in enumerate(plan.described) if "mul" in what]
    assert len(muls) == 3
    for k in muls:  # each product is dropped by the step after it, not at the end
        assert plan.sched[k + 1][1] or plan.sched[k + 2][1], plan.describe()
    assert len(freed) == len(set(freed)) >= 3


def test_custom_ops_with_their_own_autograd_keep_their_backward(device):
    # compact / masked_select are torch.library custom ops whose autograd runs above the
    # recorder (it sees them with grad mode off): a replay of them as seen lost the gradient from
    # the third call on. Such calls now run as written when a gradient is wanted; without one
    # they are planned as before.
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(4, 9, generator=g).to(device)
    m = (torch.rand(4, 9, generator=g) > 0.5).to(device)
    dv = torch.randn(36, generator=g).to(device)
    for empty in (False, True):
        xs, ms = (x0[:0], m[:0]) if empty else (x0, m)
        want = None
        for _ in range(4):
            x = xs.clone().requires_grad_()
            values, count = roofkit.compact(x, ms)
            assert values.grad_fn is not None
            (grad,) = torch.autograd.grad(values, x, dv[:values.numel()])
            want = grad if want is None else want
            assert torch.equal(grad, want)
            out = roofkit.masked_select(x, ms)
            assert out.grad_fn is not None
    roofkit.compact.plans.clear()
    for _ in range(3):
        values, count = roofkit.compact(x0, m)  # no gradient wanted: planned as before
    (entry,) = roofkit.compact.plans.values()
    # (a device may leave the op unplanned for its own reasons, never for the autograd one)
    assert isinstance(entry, Plan) or not any(w in entry.why for w in ("differentiates itself", "seen once")), entry
