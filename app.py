"""mha-viz dashboard: `streamlit run app.py` (the Streamlit code lives in mha_viz.ui).

Streamlit runs this file as the page's script for every visit (``__name__ == "__main__"``). At server start,
`streamlit run` finds the st.App below and imports this file once as a module: its lifespan starts loading the
bundled model then, while the first browser fetches the page (mha_viz/serve/start.py).
"""

import streamlit as st

from mha_viz.runtime import before_torch

before_torch()  # torch's threads per request (MHA_VIZ_TORCH_THREADS; 1 when hosted), huge pages; before torch loads

if __name__ == "__main__":
    from mha_viz.serve.early import page_imports

    # one thread imports torch, plotly, pandas...; concurrent first pages wait (issue 21 §2.4), a cold server's
    # with a tiny chart drawn meanwhile: the browser fetches Plotly's code during the wait (serve/early.py)
    page_imports()
    from mha_viz.ui import main

    main()
else:
    from mha_viz.serve.limits import middleware
    from mha_viz.serve.ready import routes
    from mha_viz.serve.start import lifespan

    # the page stream's limits; GET /ready: 200 once the preload has loaded the model (mha_viz/serve/ready.py)
    app = st.App(__file__, lifespan=lifespan, middleware=middleware(), routes=routes())
