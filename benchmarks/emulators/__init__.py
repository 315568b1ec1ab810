"""Job commit on the storage emulators (Azurite, fake-gcs-server).

Run: ``python -m benchmarks.emulators``.

See ``runner.py`` for how runs are isolated, ``modes.py`` for what is compared, and
``report.py`` for the Markdown report and plots.
"""
