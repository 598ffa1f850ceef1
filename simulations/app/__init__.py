"""The main job: a Flower app (ServerApp + ClientApp) on real MNIST digits with coded-fl."""
