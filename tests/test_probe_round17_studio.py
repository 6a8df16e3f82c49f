"""Round 17: LangGraph Studio's leftovers (``agora studio`` on a loopback OpenAI stub pool, and the
same graphs in-process).

Found: a misspelt input key (``{"question": ..., "golden": "5"}``) was only named in the server's log
and the run went on without gold; a multiple-choice input with ``n_choices`` 0 ran, as did one
without ``n_choices`` whose gold is past D (the nodes read answers among A-D, the gold check took
A-J), and every answer read was null; a question had no size bound (a 20 MB question was taken and
sent to every model); the state view's type descriptions (Studio's ``state_schema``: ``MethodResult``,
``SharedCandidate``, the duel's records) showed raw reStructuredText double backticks."""

import json
import re

import pytest

from test_studio import ROOT, post, start_studio, stop, wait_until_up


def moa_and_pool(reply: str = "The answer is C."):
    from agora.graphs.moa import MoAContext, graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    chats = {n: ScriptedChatModel(responses=[reply], cycle=True) for n in "abc"}
    return graph, MoAContext(ModelPool.from_chat_models(chats)), chats


QUESTION = "Which is 2 + 2?\nA. 3\nB. 5\nC. 4\nD. 6\nE. 7\nF. 8"
FIELDS = "question, question_id, kind, n_choices, gold"


# ---------------------------------------------------------------------------------------- a. unknown input keys


def test_an_unknown_input_key_is_refused_in_one_line_naming_it_and_the_fields():
    from agora.tasks.errors import InputError

    graph, context, chats = moa_and_pool()
    with pytest.raises(InputError) as refused:
        graph.invoke({"question": "What is 2 + 2?", "golden": "4"}, context=context)
    assert str(refused.value) == f"graph input: unknown field(s) golden (did you mean gold?); its fields are {FIELDS}"
    with pytest.raises(InputError) as refused:
        graph.invoke({"question": "What is 2 + 2?", "Gold": "4", "notes": "x", "questoin_id": "q1"}, context=context)
    assert str(refused.value) == ("graph input: unknown field(s) Gold (did you mean gold?), notes, questoin_id (did "
                                  f"you mean question_id?); its fields are {FIELDS}")
    assert all(chat.calls == [] for chat in chats.values())  # refused before any model was asked


def test_the_async_run_refuses_it_too_and_known_keys_still_run():
    import asyncio

    from agora.tasks.errors import InputError

    graph, context, _ = moa_and_pool("The answer is 4.")
    with pytest.raises(InputError, match=r"^graph input: unknown field\(s\) golden \(did you mean gold\?\)"):
        asyncio.run(graph.ainvoke({"question": "What is 2 + 2?", "golden": "4"}, context=context))
    out = graph.invoke({"question": "What is 2 + 2?", "gold": "4", "shared_candidates": {}}, context=context)
    assert out["methods"]["moa"]["correct"] is True  # the bench's shared_candidates is still taken


def test_graphs_without_gold_refuse_a_gold_key():
    from agora.graphs.selection import graph
    from agora.tasks.errors import InputError

    with pytest.raises(InputError) as refused:
        graph.invoke({"prompts": ["Say hi."], "gold": "hi"})
    assert str(refused.value) == "graph input: unknown field(s) gold; its fields are prompts, models, features"
    with pytest.raises(InputError) as refused:
        graph.invoke({"prompts": ["Say hi."], "a\nb": 1})
    assert str(refused.value) == "graph input: unknown field(s) 'a\\nb'; its fields are prompts, models, features"


# ---------------------------------------------------------------------------------------- b. n_choices of mc


@pytest.mark.parametrize("n_choices", [0, -1, 11, 27])
def test_a_multiple_choice_input_with_too_few_or_too_many_options_is_refused(n_choices):
    from agora.tasks.errors import InputError

    graph, context, chats = moa_and_pool()
    with pytest.raises(InputError) as refused:
        graph.invoke({"question": QUESTION, "kind": "mc", "n_choices": n_choices, "gold": "C"}, context=context)
    assert str(refused.value) == {
        0: "graph input field 'n_choices': a multiple-choice question has at least 2 options (A, B), not 0",
    }.get(n_choices, f"graph input field 'n_choices' must be an integer in 0..10 (options A to J), not {n_choices}")
    assert all(chat.calls == [] for chat in chats.values())


def test_a_multiple_choice_gold_past_d_needs_n_choices():
    """Without ``n_choices`` the nodes read answers among A-D (its default 4): gold F ran, and every
    ``The answer is F.`` was read as no answer."""
    from agora.tasks.errors import InputError

    graph, context, chats = moa_and_pool("The answer is F.")
    with pytest.raises(InputError) as refused:
        graph.invoke({"question": QUESTION, "kind": "mc", "gold": "F"}, context=context)
    assert str(refused.value) == ("graph input field 'gold' of a multiple-choice question must be one of the option "
                                  "letters A-D, not 'F' (no answer could match it)")
    assert all(chat.calls == [] for chat in chats.values())
    out = graph.invoke({"question": QUESTION, "kind": "mc", "gold": "F", "n_choices": 6}, context=context)
    assert out["answer"] == "F" and out["methods"]["moa"]["correct"] is True
    out = graph.invoke({"question": QUESTION, "kind": "mc", "gold": "C"}, context=context)
    assert out["methods"]["moa"]["answer"] is None  # F is no answer among A-D, as the check said


# ---------------------------------------------------------------------------------------- c. question size


def test_a_question_past_the_bound_is_refused_in_one_line():
    from agora.graphs.question import MAX_QUESTION_CHARS, checked_input
    from agora.tasks.errors import InputError

    assert MAX_QUESTION_CHARS == 1_048_576
    graph, context, chats = moa_and_pool()
    with pytest.raises(InputError) as refused:
        graph.invoke({"question": "x" * (MAX_QUESTION_CHARS + 1)}, context=context)
    assert str(refused.value) == ("graph input field 'question' is 1,048,577 characters long; at most 1,048,576 are "
                                  "taken (a task file's line holds no more)")
    assert all(chat.calls == [] for chat in chats.values())
    assert checked_input({"question": "x" * MAX_QUESTION_CHARS})["question"]  # at the bound: taken


def test_the_longest_question_a_task_file_holds_is_taken(tmp_path):
    """A task file's line holds at most ``MAX_LINE_BYTES`` bytes: its question fits the bound."""
    from agora.graphs.question import checked_input, problem_input
    from agora.tasks.loaders import MAX_LINE_BYTES, load_problems

    for fmt, line in (("gsm8k", '{"question": "%s", "answer": "#### 7"}'),
                      ("mc", '{"question": "%s", "choices": ["a", "b"], "answer": "A"}')):
        pad = MAX_LINE_BYTES - len(line % "")
        path = tmp_path / f"{fmt}.jsonl"
        path.write_text(line % ("y" * pad) + "\n")
        [problem] = load_problems(path, fmt)
        assert len(problem.question) >= MAX_LINE_BYTES - 60
        assert checked_input(problem_input(problem))["question"] == problem.question


# ---------------------------------------------------------------------------------------- d. the state view


def state_schema(graph) -> dict:
    """The state view's JSON schema as langgraph-api 0.16.7 builds it (``api/assistants.py``,
    ``_state_jsonschema``: a pydantic model of each streamed channel's update type)."""
    from typing import Any

    from pydantic import create_model

    fields = {}
    for key in graph.stream_channels_list:
        kind = graph.channels[key].UpdateType
        try:
            create_model(key, value=(kind, None)).model_json_schema()
            fields[key] = (kind, None)
        except Exception:  # (as the server: a type pydantic cannot draw is Any)
            fields[key] = (Any, None)
    return create_model(graph.get_name("State"), **fields).model_json_schema()


RST = re.compile(r"``|:(?:func|class|mod|meth|data|attr):`")


def test_the_state_views_descriptions_carry_no_restructuredtext():
    from agora.graphs import registry

    shown = {}
    for spec in registry.specs():
        schema = state_schema(spec.compiled())
        text = json.dumps(schema)
        assert not RST.search(text), (spec.name, RST.findall(text)[:3], text[text.find("``") - 80:][:200])
        shown[spec.name] = schema
    method = shown["moa"]["$defs"]["MethodResult"]
    assert method["description"] == 'One `results` row as a graph writes it under `state["methods"][method]`.'
    assert method["properties"]["correct"]["description"] == "`None` without a gold answer."  # fields described too
    assert shown["duel"]["$defs"]["LeaderState"]["description"] == ("The leader's weights, sparse: instructions absent "
                                                                    "from `log_w` have `log_w_rest`.")


# ---------------------------------------------------------------------------------------- through the server


@pytest.mark.slow
def test_through_agora_studio_unknown_keys_mc_options_long_questions_and_the_state_view(tmp_path):
    from openai_stub import StubServer

    with StubServer() as stub:
        pool = tmp_path / "stub.toml"
        pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{stub.base_url}"\n'
                                f'model = "stub"\n\n' for m in "abc"))
        proc, base, log, sink = start_studio(tmp_path, ROOT)
        try:
            wait_until_up(proc, base, log)
            context = {"pool": str(pool), "config": {"shots": 0}}

            def run(inp):
                return post(f"{base}/runs/wait", {"assistant_id": "moa", "input": inp, "context": context},
                            timeout_s=300)

            bad = run({"question": "What is 2 + 2?", "golden": "4"})
            assert bad["__error__"]["message"] == ("graph input: unknown field(s) golden (did you mean gold?); its "
                                                   f"fields are {FIELDS}"), bad
            bad = run({"question": QUESTION, "kind": "mc", "n_choices": 0})
            assert bad["__error__"]["message"] == ("graph input field 'n_choices': a multiple-choice question has at "
                                                   "least 2 options (A, B), not 0"), bad
            bad = run({"question": "x" * 1_048_577})
            assert bad["__error__"]["message"].startswith("graph input field 'question' is 1,048,577 characters"), bad
            assert not stub.requests  # no model was asked
            done = run({"question": "What is 2 + 2?", "gold": "4"})
            assert done["methods"]["moa"]["correct"] is True, done

            [moa] = post(f"{base}/assistants/search", {"graph_id": "moa"})
            with __import__("urllib.request").request.urlopen(f"{base}/assistants/{moa['assistant_id']}/schemas",
                                                              timeout=60) as resp:
                text = resp.read().decode()
            assert '"description":"One `results` row as a graph writes it' in text.replace(": ", ":")
            assert not RST.search(text), text[text.find("``") - 80:][:200]
        finally:
            stop(proc, sink)
