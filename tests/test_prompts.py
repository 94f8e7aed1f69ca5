"""Every prompt kbvqa sends is registered, versioned and pinned: a wording change must bump the
prompt's version and update this table, so old and new verdicts are never confused."""

from __future__ import annotations

from kbvqa.models import prompts

PINNED = {  # prompt id -> sha256 of its text
    "ablation.generate_probes@1": "225e7feaaf1f341b9a438a309c0281d67ad2f30aea0e68aeb237c964d30eccbc",
    "ablation.read_passage@1": "16a6d206e67a2b5ee1f9ac2cb0e8313680374a19f100eb6230af6dc1987b97e7",
    "agent.answer_now@1": "8ffa039152ff319c2bf976635592ce45f38ebe35589a7e643a32e5a2b103097e",
    "agent.failure_category@3": "2bdf035e0a8f27859b0b5db07b9826ae8b4a2c11faf753bb4925a9a5f92e0f40",
    "agent.forced_answer@1": "14dd683c5ed11171e74d679a90176ec2dff65cc833abce1d443ce050d31a0cd8",
    "agent.format_error@1": "af273728cba8fb7223c21b16ee8bdedcab36c20253dc6039efc847160e23134a",
    "agent.guided_question@1": "43b733b69e5925bc5899c72d6b00fc79aac73f6821e00a35b98ff8809117cda0",
    "agent.nothing_new@1": "cc9bc42257e3fa62f49c72b56c7681fd44c62444cfa5615bc7b5ae3666b73d0f",
    "agent.repeat_warning@1": "7933d06659c00aed5b55c37d872b41e47580e94227a4558af77f50442b3e16b8",
    "agent.system@2": "86ccdbf08dcb1ecb38127f4a0737b866988893714f355bfdb047a5713ad8aeb1",
    "agent.useful_evidence@1": "1fd3734a4d3d93972c55da0de0bf1b08431cb54576729085783a4b091fc0e3d7",
    "agent.visit_extract@1": "2cb5738106e3ed97843c6ff9eba36361a5d570cc7ec78f8dbf28d2683ec71d71",
    "answer.identify_entity@1": "49536e3154ca3f6169077d2c5b031c811b3747181c9cc6747d940a302e866872",
    "answer.rerank_sections@1": "bf39ee2df64ba46ab0099f3216d52d245b27128c6a6789ab1054452fa8716117",
    "answer.short@1": "be3c40f39746b7ebd707c269890fa7d59211132c13f98c684fde978aa1d8775c",
    "audit.correct_answer@2": "4de7046c0c89579bc001d363c684594435084a9ef2ecb127df34c667a517ac1d",
    "audit.final_check@1": "cede14d400eb385d60a9c701491f85ac2b67a1e254cf7f2abf9af59e0d29bacc",
    "audit.posedness@2": "b533995c71947beb411852b45c17323fb85a2007e58dc625c1a8d339606e3ae9",
    "audit.verify_section@2": "098dd43ea7d4a489f09f5c5368648a42b6967839f3e5d2e044ad5f1ecfa52482",
    "augment.entity_type@1": "a31e2c5be9a08544bb8adb3353a42533049c379ed7231c27727d3df7c2036172",
    "curate.aesthetic@1": "d4d10b6929bdc7363b122e02a04ebb6be2be96765c6861f1aa2cba6b1a91bd37",
    "curate.answer_probe@1": "a5c25ae5d21bddb0c15a8d91d69a7b5e346c9b65625cfba8993ca62f5ca3ee26",
    "curate.classify@1": "f5edc1339dd6a79d483d952644b83d3abb73af38afd5989dbffca140c992cbf2",
    "curate.image_text_consistency@1": "ee6750c6bf2ecd8663e6a66c3c18f97c5210f19efa5caaeb39091b2f54cc6d1d",
    "curate.interleaved_fit@1": "187b768fa591fd62ca09840949080cd8074cfab7df114bc8bb9df01637fb1c14",
    "curate.plausible_answer@1": "af216d43abf4e37ea7cad1a4254548fa54f82401348597c288d8c6ffacaeb561",
    "curate.probe_agreement@1": "0fc27371c17b40497b044afeb98fb868f5ff610d6fbcd838d3fe4d322fdbf859",
    "curate.reasoning_hops@1": "e2af10075ea026a8e67791b74e26e2283b077193a9c3690cf90249fce5f07d5e",
    "curate.rewrite@1": "c907fe234da229ca7eb0525051b6426da8b80158e3a8fc0bba9b4ffc291f8439",
    "curate.rewrite_check@1": "879b5a27d23728dd1ccf10835584641b2f3536baa8edd226555376897241e63e",
    "curate.rubric@1": "61ace35bf90c1f166ff1aae031f7b7b14deb63d840a6d7c3b220022396a77d0f",
    "curate.standardize@2": "18fd1fd1d73c3684da79db3fa57c4d8dcbad9dad3aeddf7edaae6466afecca51",
    "curate.text_only_answer@1": "13c12747e639ef6abfbdd8f41039383c4819e7fbc3a1d968104f406492357ed5",
    "curate.translate@2": "c644a7a29c93638f53f0cc83aa0f1f2b9143eaf1c39f146edba9cd083e8ac78f",
    "curate.translation_check@1": "60829fd64384ffe3abec88c45b3d3180906d312613427e3a23627a558c6bded3",
    "curate.vqa_candidate@1": "5abe9c61be6705b95458312dbedb1e9561a93bab70213cce928434fab6e8797b",
    "direct.answer@1": "b0f7680d4b2bc9ff83b059c3bc9c2b7fd906b8f014d19748344a2d5bb544ea61",
    "ivr12.content@1": "455fe59d929c8d0e16f441e7358c989349990e2271a1f4d1c42477a8f1a46c6d",
    "ivr12.gate@1": "e5b86c33f2179b6aab7d2e129df341ae9ed911524afc69a852d5649779ebde5b",
    "ivr12.image@1": "3c9b442aa396208e6ae0457bcc91d42c4d5efde1f61f1805c7d26d71f089968c",
    "ivr12.presentation@1": "45d474b342bf50aa4a917dc68fc8452b2a5f8f68e98cef07ebae1414d62cb443",
    "judge.simpleqa@1": "b6b8bfe3ddec3e5fb5a44fdee89973bf416db0a797323befeaa06bc3d4d463cc",
    "judge.paragraph@1": "7c588e4a9b4c3f0ddaf23a3f7ab523e06de404c57eb08a1dff560f4416e4ff05",
    "reference.candidate_score@1": "34f9db3226fac12453aa23a77f25838490ab85a46cd28b94010a3c652882321a",
    "reference.consistency_check@1": "f13421060239796611643344d2a983a110e60d2fd8cf08a6d33bf7a3ce52db5b",
    "reference.entity_check@1": "030ef4043808720485481b78367a608140150b543c9d92c663634749b113a5b5",
    "reference.five_rule_filter@2": "93e9b36e411e657d50d9fd34a7612d21754e8d6525626f56622edcf24f35976e",
    "reference.similar_probe@1": "beb6ec7de7a7444335d5a3a569d512beb00e49455a1b1de179d7fee0b0c5b807",
    "reference.synthesis@2": "21694b31075f4be426d57623b0644e737ebb85c7daa339954924d3c46b7c6355",
    "reference.url_scores@2": "f2ccfccb28bc9f991e9493184bda54fa34cff8a61f5a523c7c1f92489e01a9d1",
}


def test_every_registered_prompt_is_pinned():
    assert {p.id: p.sha256 for p in prompts.all_prompts().values()} == PINNED


def test_every_stage_prompt_is_registered():
    """A stage's declared prompts are the registered ones (the manifest records their hashes)."""
    from kbvqa.cli.app import app  # noqa: F401 - the full app imports every command: every stage registered
    from kbvqa.stages import STAGES

    registered = {p.id for p in prompts.all_prompts().values()}
    declared = {pid for e in STAGES for pid in e.obj().prompt_versions()}
    # the one declared id that is not a prompt: IVR-12's rubric (a data file versioned beside its prompts)
    assert declared and declared - registered == {"ivr12.rubric@2-reconstructed"}


#: Which prompts compose each shared fragment: editing one changes the hash of exactly these.
FRAGMENT_USERS = {
    "reply.json": 36,  # every strict-JSON checker and judge outside the answer family
    "reply.json_example": {"answer.short", "answer.identify_entity", "answer.rerank_sections"},
    "judge.verdict": {"judge.simpleqa", "judge.paragraph"},
    "ivr12.answer_fence": {"ivr12.content", "ivr12.presentation", "ivr12.image", "ivr12.gate"},
    "reference.known_answer": {"reference.url_scores", "reference.candidate_score", "reference.five_rule_filter",
                               "reference.entity_check"},
    "curate.post": {"curate.vqa_candidate", "curate.text_only_answer", "curate.image_text_consistency",
                    "curate.interleaved_fit", "curate.rubric", "curate.plausible_answer", "curate.standardize"},
}


def test_each_fragment_is_composed_into_the_prompts_that_share_it():
    users: dict[str, set[str]] = {}
    for p in prompts.all_prompts().values():
        for name in p.fragments:
            users.setdefault(name, set()).add(p.name)
    assert set(users) == set(prompts.FRAGMENTS) == set(FRAGMENT_USERS)
    for name, expected in FRAGMENT_USERS.items():
        assert (len(users[name]) if isinstance(expected, int) else users[name]) == expected, name
        assert len(users[name]) >= 2, f"{name} is used by one prompt only: it belongs in that prompt"
    assert prompts.get("judge.paragraph").describe()["fragments"] == "reply.json,judge.verdict"


def test_a_fragment_is_written_once():
    """Said once: a fragment's text stands in the source of the prompts package at most once, where it is
    defined (or not at all, when it is built from parts), so every prompt gets it by composition and a
    change to it reaches them all."""
    from pathlib import Path

    sources = {f.name: f.read_text(encoding="utf-8") for f in Path(prompts.__file__).parent.glob("*.py")}
    for name, text in prompts.FRAGMENTS.items():
        forms = {text, text.replace("\n", "\\n")}
        where = [f for f, src in sorted(sources.items()) for form in forms for _ in range(src.count(form))]
        assert len(where) <= 1, f"fragment {name} is written out more than once: {where}"


def test_a_prompts_fields_are_the_placeholders_of_its_text():
    """`define` takes a prompt's fields from its text; a prompt that declares them must declare the same set
    (a declared field its text never shows would be sent nowhere; an undeclared placeholder fails to render)."""
    assert prompts.placeholders('{b} {{"x": 1}} {a_raw} {b}') == ("b", "a_raw")
    for p in prompts.all_prompts().values():
        assert set(p.fields) == set(prompts.placeholders(p.user)), p.name
        if p.system_fields:
            assert set(p.system_fields) == set(prompts.placeholders(p.system)), p.name
