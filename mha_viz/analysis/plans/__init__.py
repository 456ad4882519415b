"""Each view's choices as plain data: which tokens, which head opens, which pairs, which notes. A plan function takes
plain values (labels, arrays, flags) and returns a frozen dataclass; the view in ui/views/ draws it. Pure (no model,
no Streamlit, no Plotly), so the choices are tested in milliseconds (tests/test_plans.py)."""
