"""Cache simulator: vLLM's adapter cache tiers under a trace, baselines and the offline optimum."""
