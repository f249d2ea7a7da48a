"""Suite-wide settings: every random draw is seeded, hypothesis's included.

Hypothesis draws its examples from a fixed seed per test (``derandomize=True``; no example
database), so a run on any machine tries the same examples as every other run.
"""

from hypothesis import settings

settings.register_profile("seeded", derandomize=True, database=None)
settings.load_profile("seeded")
