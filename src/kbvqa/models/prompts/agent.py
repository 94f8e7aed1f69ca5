"""The search agent's prompts (seed 001 §3.3, App. D): the ReAct system prompt with the Subject /
Background image protocol and the image-tag grammar, the harness's own messages (format errors,
"answer now" near a budget, the notice that a call added nothing new, the forced last turn after the
harness stops the tool phase), the visit extractor, and the two study judges: the failure judge
(seed 001 Table 5's categories, each marked as the paper's or kbvqa's) and the useful-evidence judge
(the hit rates beside Table 4; kbvqa.evaluate.agent_evidence)."""

from __future__ import annotations

from kbvqa.models.prompts import Prompt, define, register
from kbvqa.models.prompts.fragments import BOOL, JSON_ONLY, free, one_of, returns

SYSTEM = register(Prompt(
    name="agent.system", version="2",
    system="""\
You are a multimodal research agent. A user asks a question that comes with one or more images. Search thoroughly, drawing on different kinds of sources, reason step by step, and keep your final answer accurate and brief, illustrated with images where they help.

# How every turn looks
Start with <think>...</think>: read the question, the images and the tool results so far, and decide the next step. Then write exactly one of:
- <tool_call>{{"name": "<tool>", "arguments": {{...}}}}</tool_call> to call ONE tool when you still need information, or
- <answer>...</answer> once you know enough.
Nothing may follow the tool call or the answer. Tool results come back inside <tool_response>...</tool_response>.

# Rules
- Every reply opens with <think>, and a turn calls one tool at most.
- When the question is about a particular person, place, object, artwork or film, gather facts with search or image_search before answering: identify the pictured entity first (image_search, or search with what you can see), then look up what the question asks.
- When the search results (titles and snippets) do not settle the question, open the most promising pages with visit and read them in full.
- image_search works on the question image and may be used once.
- Do not repeat a call you already made; if searches keep failing, answer from what you know and what the images show.
- Begin the answer with one sentence that answers the question directly; then explain.

# Images in the answer
Show the entities your answer is about. An entity deserves a picture when a reader gains from seeing it: it helps them follow, recognise or situate the answer. An entity that only does a job in the sentence or sets the scene does not. In <think>, list every visual entity of your planned answer and mark each SUBJECT (a main topic or key part of the answer) or BACKGROUND (mentioned in passing). Each SUBJECT entity gets exactly one image, which you must find with a text_to_image_search call; BACKGROUND entities get none.
Cite an image with a tag of its own, right after the sentence about that entity and never inside a sentence:
<image>{{"query": "<the exact query you gave text_to_image_search>", "idx": <1-based index of a returned image>}}</image>
Never write a tag without an earlier text_to_image_search call with that exact query, and never cite an index that call did not return.

# Tools
{tools_block_raw}
Today is {today_raw}.""",
    user="{question_raw}",
    fields=("question_raw",),
    system_fields=("tools_block_raw", "today_raw"),
))

# The harness's own messages: user turns with no system part, their placeholders the fields.
GUIDED_QUESTION = define("agent.guided_question", "1", (
    "{question_raw}\n\n(This run collects evidence for a reference answer. The correct short answer is "
    "\"{answer_raw}\". Use the tools to find sources and pictures that confirm and explain it; do not "
    "search for the answer text itself.)"))
FORMAT_ERROR = define("agent.format_error", "1", (
    "Your last reply could not be used: {problem_raw}. Reply with <think>...</think> followed by exactly one "
    "<tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call> or one <answer>...</answer>."))
ANSWER_NOW = define("agent.answer_now", "1", "You are about to run out of {budget_raw}. Do not call any more "
                         "tools: write your final <answer>...</answer> now from what you have found.")
REPEAT_WARNING = define("agent.repeat_warning", "1", (
    "Your recent calls keep asking the same thing and add nothing new ({detail_raw}). Try a different "
    "approach, question your current hypothesis, or answer."))
NOTHING_NEW = define("agent.nothing_new", "1", "Note: that call returned nothing that earlier calls had not "
                          "already returned. Use what you have, look elsewhere, or answer.")
FORCED_ANSWER = define("agent.forced_answer", "1", (
    "The tools are now closed: {reason_raw}. This is your last turn. Do not call a tool. Write your final "
    "<answer>...</answer> from what the tool results showed, what the image shows and what you know; "
    "if the searches found nothing useful, answer from your own knowledge and say how sure you are."))

VISIT_EXTRACT = register(Prompt(
    name="agent.visit_extract", version="1",
    system=("You read a web page for a researcher and report only what serves their goal. Quote the page; do not "
            "add knowledge of your own. " + JSON_ONLY),
    user=("Page URL: {url}\nGoal: {goal}\nPage text:\n{page}\n\n"
          + returns(rational=free("which parts of the page matter and why"),
                    evidence=free("the relevant passages, quoted"),
                    summary=free("what they say about the goal, in two or three sentences"))),
    fields=("url", "goal", "page"),
))

#: Seed 001 Table 5's categories. The paper splits failures into tool-related (T1-T4) and non-tool
#: (N1-N2) and defines only T3 (§4.2: "confirmation or anchoring loops": the agent adopts a wrong hypothesis
#: early and uses later searches to reinforce it, never seeking evidence against it); every other wording
#: here is kbvqa's reconstruction, guided by the two obstacles the paper names (finding evidence in niche
#: communities; revising a hypothesis once search is under way). `FAILURE_SOURCES` says which is which.
FAILURE_CATEGORIES = {
    "T1": "the searches never surfaced the evidence the answer needed",
    "T2": "the evidence was in a tool result, but the agent misread, overlooked or discarded it",
    "T3": "a confirmation or anchoring loop: the agent settled early on a wrong hypothesis and used later "
          "searches to confirm it instead of testing it",
    "T4": "tool misuse or an exhausted budget: malformed, repeated or unsuitable calls, failing tools, or running "
          "out of turns, tokens or time before reaching the answer",
    "N1": "a knowledge or reasoning error that the tool use did not cause",
    "N2": "the question or the image was misunderstood",
}
FAILURE_SOURCES = {c: "seed 001" if c == "T3" else "kbvqa" for c in FAILURE_CATEGORIES}


def _category_lines() -> str:
    group = {"T": "tool-related", "N": "non-tool"}
    whose = {"seed 001": "seed 001's definition", "kbvqa": "kbvqa's definition"}
    return "".join(f"- {k} ({group[k[0]]}; {whose[FAILURE_SOURCES[k]]}): {v}.\n" for k, v in FAILURE_CATEGORIES.items())


FAILURE_CATEGORY = register(Prompt(
    name="agent.failure_category", version="3",
    system=("You analyse why a search agent did not answer a question correctly. You read the question, the "
            "correct answer, how the episode went — for each step the agent's reasoning (its thoughts, which show "
            "the hypotheses it held and when it formed them), its tool call and what came back, and the "
            "harness's notices — and the agent's final answer, and pick the one category that best explains "
            "the failure. The six categories split into tool-related failures (T1-T4) and non-tool failures "
            "(N1-N2); each says whose definition it is. " + JSON_ONLY),
    user=("Question: {question}\nCorrect answer: {reference}\nOutcome: {outcome_raw}\n"
          "How the episode ended: {ending_raw}\nAgent's answer: {answer}\n"
          "The episode, step by step (thoughts may be shortened):\n{trajectory_raw}\n\n"
          "Categories:\n" + _category_lines() +
          "\nRead the thoughts: T3 is about the hypotheses, so look for a guess formed early that later searches "
          "only tried to confirm. An episode without an answer (null), or whose answer declines to answer, still "
          "gets a category: ask why the agent never reached the correct answer. A stop for budget or repetition, "
          "failing tools or malformed calls point to T4; searches that never turned up the needed facts to T1; "
          "evidence it had but did not use to T2; a wrong guess it kept trying to confirm to T3. Choose N1 or N2 "
          "only when the episode shows that error.\n"
          + returns(category=one_of(*FAILURE_CATEGORIES), rationale=free("one sentence"))),
    fields=("question", "reference", "outcome_raw", "ending_raw", "answer", "trajectory_raw"),
))

USEFUL_EVIDENCE = register(Prompt(
    name="agent.useful_evidence", version="1",
    system=("You check whether one piece of retrieved text helps answer a question. You read the question, its "
            "reference answer and the text that one search or page visit returned, and decide whether the text "
            "holds information that supports the reference's answer: it states that answer, or facts from which "
            "it follows. When the reference is a paragraph, what counts is its central claim — the "
            "identification, decision or recommendation the question asks for — not its side details. Text on "
            "the right topic that does not bear on the answer does not support it, and neither does text that "
            "contradicts it. " + JSON_ONLY),
    user=("Question: {question}\nReference answer: {reference}\nRetrieved by the agent's {tool_raw} call:\n"
          "{observation}\n\n"
          + returns(supports=BOOL, rationale=free("one sentence: which part of the text, or why none"))),
    fields=("question", "reference", "tool_raw", "observation"),
))
