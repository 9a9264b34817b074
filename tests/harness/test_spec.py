import dataclasses

from roofkit.harness import registry
from roofkit.harness.spec import OpSpec


def test_sibling_spec_changes_only_the_named_fields():
    base = registry.get("softmax")
    other = base.sibling(name="softmax_copy", marker="elsewhere")
    assert other is not base and isinstance(other, OpSpec)
    assert (other.name, other.marker) == ("softmax_copy", "elsewhere")
    assert (base.name, base.marker) == ("softmax", "softmax")  # the first spec is left as it was
    for f in dataclasses.fields(OpSpec):
        if f.name not in ("name", "marker"):
            assert getattr(other, f.name) is getattr(base, f.name), f.name


def test_sibling_ops_keep_their_own_declarations():
    # The second op of a pair declares what differs and takes the rest from the first.
    for first, second in (("softmax", "log_softmax"), ("scatter_add", "index_add"),
                          ("scaled_dot_product_attention", "flash_attention"), ("swiglu", "geglu")):
        a, b = registry.get(first), registry.get(second)
        assert b.name == second and b.impl is not a.impl and b.reference is not a.reference
        assert b.marker == a.marker and b.grad_args == a.grad_args and b.dtypes == a.dtypes
