"""The floor for a control change: a bare Streamlit page whose selectbox redraws one Plotly heatmap of the
seed sentence's size (15 × 15). bench_interact.py times it in the same run as the dashboard."""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

layer = st.selectbox("Layer", list(range(6)), key="layer")
z = np.random.default_rng(layer).random((15, 15), dtype=np.float32)
labels = [f"t{i}" for i in range(15)]
st.plotly_chart(go.Figure(go.Heatmap(z=z, x=labels, y=labels)), key="floor")
