"""Quality evaluation for restore: metrics, paired bootstrap comparisons, reports and plots.

Commands:
  python -m eval.make_testset   build a deterministic degraded test set from clean speech
  python -m eval.baselines      run the noisereduce and RNNoise baselines over degraded files
  python -m eval.run            score systems against the test set and write the report
"""

SAMPLE_RATE = 16000  # every metric here works at 16 kHz; files at other rates are resampled on load
