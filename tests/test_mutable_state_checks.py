"""assert_mutable_state on one object (issues 25 and 29; checks.py): a view that requires grad, made
in a mode, is refused in grad mode too; the name a failure's paths start with; exclusions, recorded
and never silent; the checks on one tensor; and each engine-shaped broken class (engine_states.py)
rejected on the path that holds the inference tensor, its fixed class passing.
"""

from __future__ import annotations

import re
import types

import engine_states as es
import pytest
import torch
from mutable_state_helpers import SEED_ERROR, built_in_inference_mode, inference, names

from cpugpu_conformance.testing import MutableStateTests, assert_mutable_state
from cpugpu_conformance.testing.engine.checks import in_place_refusal
from cpugpu_conformance.testing.engine.mutable_state import check_state

# --- a view that requires grad, made in a mode: refused in grad mode (issue 29)


def test_a_view_of_a_parameter_made_in_inference_mode_is_refused_in_grad_mode_only():
    state = built_in_inference_mode(es.ParameterView)
    head = state.head
    assert not head.is_inference() and head.requires_grad
    with torch.no_grad():
        head.copy_(head)  # under no_grad() torch takes the update: the old check passed it
    with pytest.raises(RuntimeError, match="A view was created in inference mode and is being modified inplace"):
        head.copy_(head)
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(state)
    message = str(caught.value)
    assert message.startswith("state: 1 of 2 tensors would refuse an in-place update"), message
    assert ("\n  state.head: a view that requires grad: an in-place update in grad mode raised RuntimeError: "
            "A view was created in inference mode") in message
    assert "state.weight" not in message  # the parameter itself is no view: updated under no_grad(), as engines do


def test_a_view_made_under_no_grad_is_refused_in_grad_mode_too():
    state = es.ParameterView(torch.device("cpu"))
    with torch.no_grad():
        state.warm_up()
    bad = check_state(state).bad
    assert [path for path, _ in bad] == ["state.head"] and "created in no_grad mode" in bad[0][1], bad


def test_what_the_grad_mode_check_rejects_is_what_the_serving_loop_hits():
    broken, fixed = built_in_inference_mode(es.EmbeddingRows), built_in_inference_mode(es.FixedEmbeddingRows)
    assert [p for p, _ in check_state(broken).bad] == ["state.rows"]
    with pytest.raises(RuntimeError, match="A view was created in inference mode"):
        broken.serve()
    assert assert_mutable_state(fixed).checked == 3
    fixed.serve()


def test_views_of_parameters_made_plainly_pass_and_get_no_graph_from_the_check():
    state = built_in_inference_mode(es.FixedParameterView)
    assert assert_mutable_state(state).checked == 2  # autograd's own rule for leaves is not the state's fault
    assert state.weight.grad_fn is None and state.head.requires_grad  # no graph written into them
    leaf = torch.nn.Parameter(torch.zeros(3))
    assert in_place_refusal(leaf) is None and in_place_refusal(leaf[:2]) is None and in_place_refusal(leaf * 2) is None
    base = torch.ones(3)
    with torch.inference_mode():
        unbound = base[:2]  # a view made in inference mode that requires no grad: grad mode is no matter
    assert in_place_refusal(unbound) is None


# --- the name a failure's paths start with (issue 29)


@pytest.mark.parametrize("name", ["InputBuffers(new", "", "class", "engine..runner", "runner.", "9lives", "a b",
                                  "state['x']", 3, None])
def test_a_name_that_is_not_python_is_refused_in_one_line(name):
    with pytest.raises(ValueError) as caught:
        assert_mutable_state(torch.zeros(1), name=name)
    text = str(caught.value)
    assert "\n" not in text and text == (f"assert_mutable_state: name={name!r} is not a Python identifier or dotted "
                                         "path (e.g. 'runner' or 'engine.runner'): every path it prints starts with it")


@pytest.mark.parametrize("name", ["runner", "engine.runner", "_private", "self.model.cache", "état"])
def test_a_name_that_is_python_starts_every_path(name):
    with pytest.raises(AssertionError, match=rf"\n  {re.escape(name)}\.bad: an inference tensor"):
        assert_mutable_state(types.SimpleNamespace(good=torch.zeros(1), bad=inference(1)), name=name)


# --- exclusions


def weights_and_cache():
    return es.WeightsAndCache(torch.device("cpu"))


@pytest.mark.parametrize("key", ["weights.w", "state.weights.w"])
def test_an_exclusion_by_path_is_recorded_never_silent(key):
    checked = assert_mutable_state(weights_and_cache(), exclude={key: "read-only weights, made in inference mode on purpose"})
    assert checked.checked == 1 and checked.excluded == {
        "state.weights.w": "read-only weights, made in inference mode on purpose"}


def test_without_the_exclusion_the_weights_are_rejected():
    with pytest.raises(AssertionError, match=r"state\.weights\.w: an inference tensor"):
        assert_mutable_state(weights_and_cache())


def test_an_exclusion_that_matches_no_path_is_an_error():
    with pytest.raises(AssertionError, match=r"stale exclusion 'state\.weigths\.w' \(typo\): the walk found no tensor"):
        assert_mutable_state(weights_and_cache(), exclude={"weights.w": "ok", "weigths.w": "typo"})


def test_an_exclusion_inside_an_excluded_path_is_stale_and_says_so():
    with pytest.raises(AssertionError, match=r"stale exclusion 'state\.weights\.w'.*inside the excluded state\.weights"):
        assert_mutable_state(weights_and_cache(), exclude={"weights": "all of it", "weights.w": "and this"})


@pytest.mark.parametrize("exclude, culprit", [({"weights.w": ""}, "give the reason"), ({"": "why"}, "is no path"),
                                              ({"weights.w": None}, "give the reason"),
                                              (["weights.w"], "exclude: expected a dict of path -> reason")])
def test_an_exclusion_without_a_reason_or_path_is_refused(exclude, culprit):
    with pytest.raises(ValueError, match=culprit):
        assert_mutable_state(weights_and_cache(), exclude=exclude)


def test_an_excluded_alias_reached_first_elsewhere_is_checked_there_and_says_so():
    w = inference(2)
    state = types.SimpleNamespace(model=types.SimpleNamespace(w=w), weights=types.SimpleNamespace(w=w))
    checked = check_state(state, {"weights.w": "read-only"})
    assert checked.bad and checked.bad[0][0] == "state.model.w"
    assert checked.excluded == {"state.weights.w": "read-only (the same object is reached first at state.model.w, "
                                                   "and checked there)"}


# --- the checks on one tensor


def test_an_ordinary_tensor_of_any_dtype_and_layout_takes_the_update_and_keeps_its_data():
    values = torch.tensor([-0.0, float("nan"), float("inf"), 1.5])
    tensors = [values.clone(), torch.zeros(1).expand(5), torch.zeros(3, 3).t(), torch.zeros(3, 3).to_sparse(),
               torch.zeros(3, dtype=torch.float8_e4m3fn), torch.zeros(3, dtype=torch.bool),
               torch.zeros(3, device="meta"), torch.zeros(2, requires_grad=True)]
    for t in tensors:
        assert in_place_refusal(t) is None, t
    kept = tensors[0]
    assert torch.equal(kept.view(torch.int32), values.view(torch.int32))  # bitwise: -0.0 and nan too


def test_a_tensor_that_requires_grad_gets_no_graph_from_the_check():
    leaf = torch.zeros(2, requires_grad=True)
    nonleaf = leaf * 2
    grad_fn = nonleaf.grad_fn
    assert in_place_refusal(leaf) is None and in_place_refusal(nonleaf) is None
    assert leaf.grad_fn is None and nonleaf.grad_fn is grad_fn


def test_an_inference_tensor_is_refused_with_the_seeds_error():
    why = in_place_refusal(inference(3))
    assert why.startswith("an inference tensor") and SEED_ERROR in why
    assert "outside inference mode raised RuntimeError" in why and "inside" not in why


@pytest.mark.parametrize("mode", ["plain", "no_grad", "inference_mode"])
def test_the_check_is_the_same_in_any_mode_of_the_caller_and_leaves_it(mode):
    state = types.SimpleNamespace(good=torch.zeros(1), bad=inference(1))
    enter = {"plain": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]
    with enter():
        before = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        checked = check_state(state)
        assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled()) == before
    assert [path for path, _ in checked.bad] == ["state.bad"]


def test_an_object_with_no_tensor_is_not_a_pass():
    with pytest.raises(AssertionError, match="could not be checked, which is no pass:\n  nothing checked: no tensor"):
        assert_mutable_state(es.LazyWorkspace(torch.device("cpu")))  # never warmed up: nothing allocated yet
    with pytest.raises(AssertionError, match=r"reachable from state \(1 excluded\).*\n  excluded: state \(all of it\)"):
        assert_mutable_state(torch.zeros(1), exclude={"state": "all of it"})


def test_a_tensor_is_a_state_of_its_own():
    assert assert_mutable_state(torch.zeros(2)).checked == 1
    with pytest.raises(AssertionError, match="\n  state: an inference tensor"):
        assert_mutable_state(inference(2))


# --- the engine-shaped classes, one object at a time


@pytest.mark.parametrize("broken, fixed", es.BROKEN_AND_FIXED, ids=[b.__name__ for b, _ in es.BROKEN_AND_FIXED])
def test_each_broken_engine_state_is_rejected_on_its_path_and_its_fix_passes(broken, fixed):
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(built_in_inference_mode(broken))
    message = str(caught.value)
    assert names(message, broken.BAD_PATH) and "an inference tensor" in message and SEED_ERROR in message, message
    checked = assert_mutable_state(built_in_inference_mode(fixed))
    assert checked.checked >= 1 and not checked.bad


def test_the_failure_names_every_bad_path():
    with pytest.raises(AssertionError) as caught:
        assert_mutable_state(built_in_inference_mode(es.RequestTables), name="tables_owner")
    lines = str(caught.value).splitlines()
    assert lines[0] == ("tables_owner: 2 of 2 tensors would refuse an in-place update "
                        "(promise 3, Mutable wherever they were made):")
    # Each path on a line of its own, then the refusal they share, once.
    assert lines[1:3] == ["  tables_owner.tables['default'][0]", "  tables_owner.tables['default'][1]"]
    assert lines[3].startswith("    refused: an inference tensor") and SEED_ERROR in lines[3] and len(lines) == 4


def test_what_the_check_rejects_is_what_the_engine_hits():
    """The walk's verdict and the serving loop agree: the broken workspace raises the seed's error
    when updated outside inference mode, the fixed one does not."""
    broken, fixed = built_in_inference_mode(es.LazyWorkspace), built_in_inference_mode(es.FixedLazyWorkspace)
    with pytest.raises(RuntimeError, match=SEED_ERROR):
        broken.serve()
    fixed.serve()


def test_an_engine_with_a_cycle_passes_and_every_tensor_is_checked():
    engine = es.Engine(torch.device("cpu"))
    with torch.inference_mode():
        engine.warm_up()
    checked = assert_mutable_state(engine)
    assert checked.checked == 3  # the batch's two ids and the workspace


def test_the_names_are_the_librarys():
    import cpugpu_conformance.testing as testing

    assert testing.MutableStateTests is MutableStateTests and testing.assert_mutable_state is assert_mutable_state
    assert {"MutableStateTests", "assert_mutable_state"} <= set(dir(testing))
