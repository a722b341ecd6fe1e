"""Property-based fuzzing of evaluate: random (often invalid) CSR inputs give P@k equal to a plain
reference implementation, or an XmcbenchError; never another exception, never a silent wrong value."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xmcbench.errors import XmcbenchError
from xmcbench.metrics import evaluate

SCORES = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 0.5, -1.0, math.inf, -math.inf, math.nan]),
    st.floats(width=32, allow_nan=False),
)


@st.composite
def raw_csr(draw, n: int, n_labels: int, values):
    """(indptr, indices, data) lists: usually a valid CSR, sometimes corrupted in one way."""
    indptr, indices = [0], []
    for _ in range(n):
        ids = st.integers(0, n_labels - 1) if n_labels else st.nothing()
        row = draw(st.lists(ids, max_size=n_labels, unique=draw(st.booleans()) or draw(st.booleans())))
        indices += row
        indptr.append(len(indices))
    data = [draw(values) for _ in indices]
    corruption = draw(st.sampled_from(["none"] * 6 + ["id", "indptr", "start", "end", "length", "data"]))
    if corruption == "id":
        indices.append(draw(st.sampled_from([-1, -(2**31), n_labels, n_labels + 7])))
        data.append(1.0)
        indptr[-1] += 1
    elif corruption == "indptr" and n >= 2:
        indptr[1], indptr[2] = indptr[2] + 1, indptr[1]
    elif corruption == "start":
        indptr = [x + 1 for x in indptr]
    elif corruption == "end":
        indptr[-1] += draw(st.sampled_from([-1, 1]))
    elif corruption == "length":
        indptr = indptr[: draw(st.integers(0, len(indptr) - 1))]
    elif corruption == "data":
        data.append(1.0)
    return indptr, indices, data


def as_matrix(shape, parts, dtype) -> sp.csr_matrix:
    """Set the arrays directly, as scipy's constructor would refuse some of them."""
    indptr, indices, data = parts
    m = sp.csr_matrix(shape, dtype=dtype)
    m.indptr = np.asarray(indptr, dtype=np.int32)
    m.indices = np.asarray(indices, dtype=np.int32)
    m.data = np.asarray(data, dtype=dtype)
    return m


def structure_ok(shape, parts) -> bool:
    indptr, indices, data = parts
    n, n_labels = shape
    return (
        len(indptr) == n + 1
        and indptr[0] == 0
        and indptr[-1] == len(indices) == len(data)
        and all(a <= b for a, b in pairwise(indptr))
        and all(0 <= i < n_labels for i in indices)
    )


def rows(parts):
    indptr, indices, data = parts
    for r in range(len(indptr) - 1):
        yield list(zip(indices[indptr[r] : indptr[r + 1]], data[indptr[r] : indptr[r + 1]]))


def reference_precision(shape, pred, truth, ks):
    """P@k in percent by the book, or None where the inputs are invalid."""
    if not (structure_ok(shape, pred) and structure_ok(shape, truth)):
        return None
    pred_rows, truth_rows = list(rows(pred)), list(rows(truth))
    for row in pred_rows:
        if any(math.isnan(s) for _, s in row) or len({label for label, _ in row}) < len(row):
            return None  # NaN has no rank; a label scored twice is ambiguous
    if any(not math.isfinite(v) for row in truth_rows for _, v in row):
        return None
    out = {}
    for k in ks:
        hits = 0
        for row, true_row in zip(pred_rows, truth_rows):
            relevant = {label for label, v in true_row if v != 0}
            ranked = sorted(row, key=lambda entry: (-entry[1], entry[0]))[:k]  # ties: lower label first
            hits += sum(label in relevant for label, _ in ranked)
        out[f"P@{k}"] = 100.0 * hits / (k * shape[0]) if shape[0] else 0.0
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_evaluate_is_right_or_raises_xmcbench_error(data):
    n, n_labels = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 6))
    truth_shape = data.draw(st.sampled_from([(n, n_labels)] * 5 + [(n + 1, n_labels), (n, n_labels + 1)]))
    pred = data.draw(raw_csr(n, n_labels, SCORES))
    truth = data.draw(raw_csr(*truth_shape, st.sampled_from([1.0, 1.0, 0.0, 2.0, math.nan, math.inf])))
    ks = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 7, 10**9]), min_size=1, max_size=3, unique=True)))
    try:
        got = evaluate(
            as_matrix((n, n_labels), pred, np.float32), as_matrix(truth_shape, truth, np.float32), k=ks, metrics=["P"]
        )
    except XmcbenchError as exc:
        expected = None if truth_shape != (n, n_labels) else reference_precision((n, n_labels), pred, truth, ks)
        assert expected is None, f"valid input refused: {exc}"
        assert "\n" not in str(exc)
        return
    assert truth_shape == (n, n_labels)
    expected = reference_precision((n, n_labels), pred, truth, ks)
    assert expected is not None, "invalid input was scored"
    assert got == {name: pytest.approx(value, abs=1e-9) for name, value in expected.items()}
