"""`mha-viz app` runs this script with Streamlit (the repository's app.py does the same)."""

from mha_viz.ui import main

main()
