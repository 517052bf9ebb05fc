"""Understanding conversations: recall plans, background extraction, prompt assembly, onboarding and
reflexive verification. Optional LLM (OpenAI-compatible) with a deterministic path for every task."""
