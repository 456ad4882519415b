"""The installed package's Streamlit script, alone in its folder: Streamlit puts the script's folder first on
sys.path, so no module here may share a name with a library (mha_viz/serve/ holds start.py, limits.py)."""
