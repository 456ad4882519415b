"""`mha-viz app` runs this script with Streamlit (the repository's app.py does the same, and starts the
bundled model's load with the server the same way)."""

import streamlit as st

if __name__ == "__main__":
    from mha_viz.ui import main

    main()
else:
    from mha_viz.server_start import lifespan

    app = st.App(__file__, lifespan=lifespan)
