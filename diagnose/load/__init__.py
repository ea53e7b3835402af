"""Load on a live service: latency histograms, the closed- and open-model generators, the sweep
of load levels and the experiment over environment variants, and the runner around them."""
