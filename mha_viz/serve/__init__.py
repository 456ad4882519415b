"""The Streamlit server: the packaged page script (script/), the preload at server start and the page
stream's limits. Nothing imports this package but the scripts themselves."""
