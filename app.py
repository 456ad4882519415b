"""mha-viz dashboard: `streamlit run app.py` (the Streamlit code lives in mha_viz.ui)."""

from mha_viz.ui import main

main()
