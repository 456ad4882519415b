"""Real-browser end-to-end tests of the dashboard (Playwright + Chromium)."""
