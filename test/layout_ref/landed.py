# SPDX-License-Identifier: MIT
"""What of the engine layouts (issue 14) wcd serves on main: the tests
against wcd cover exactly these, and this file grows as the work lands.
Everything else is checked by the reference's own tests only."""

# Architectures and the tp (and ep) sizes wcd lays out as the engines do.
ARCHS = {
    "LlamaForCausalLM": (1, 2, 4, 8),
    "Qwen2ForCausalLM": (1, 2, 4, 8),
    "Qwen3ForCausalLM": (1, 2, 4, 8),
    "MistralForCausalLM": (1, 2, 4, 8),
    "Gemma2ForCausalLM": (1, 2, 4, 8),
    "Gemma3ForCausalLM": (1, 2, 4, 8),
    "Phi3ForCausalLM": (1, 2, 4, 8),
    "MixtralForCausalLM": (1, 2, 4, 8),
    "Qwen3MoeForCausalLM": (1, 2, 4, 8),
    "DeepseekV2ForCausalLM": (1, 2, 4, 8),
    "DeepseekV3ForCausalLM": (1, 2, 4, 8),
}
# The manifest announces padded_rows on vocabulary tensors.
PADDED_ROWS = True
# The manifest lists the fused views (qkv_proj, gate_up_proj, w13/w2 and
# their bias/scale companions).
VIEWS = True
# wcd takes --ep-size/--ep-rank.
EP = True

# WC_LAYOUT_ALL=1: check every architecture and size, every field, whatever
# has landed (to try a branch of the layout work against the reference).
import os as _os

if _os.environ.get("WC_LAYOUT_ALL") == "1":
    import ref as _ref
    ARCHS = {a: (1, 2, 4, 8) for a in _ref.ARCHS}
    PADDED_ROWS = VIEWS = EP = True
