"""The search agent (seed 001 AgenticInterleave): protocol parsing, policies, the ReAct loop, image tags."""
