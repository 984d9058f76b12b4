

def test_shared_metrics_do_not_keep_their_registry_or_engine_alive() -> None:
    """A gateway's registry is lent to each engine it builds; once the gateway is gone, the registry and the
    engine bound to it (weights and KV cache, about a gigabyte) must go too."""
    import gc
    import weakref

    from prometheus_client import CollectorRegistry

    from engine import EngineMetrics

    class Source:  # the stats source an AsyncEngine binds: a method of the engine
        def __call__(self) -> None:
            return None

    registry = CollectorRegistry()
    metrics = EngineMetrics.on(registry)
    assert EngineMetrics.on(registry) is metrics  # one set of metric names per registry
    source = Source()
    metrics.bind_stats(source)
    gone_registry, gone_source = weakref.ref(registry), weakref.ref(source)
    del registry, metrics, source
    gc.collect()
    assert gone_registry() is None and gone_source() is None


def test_a_registry_that_outlives_its_engine_does_not_keep_it_alive() -> None:
    """A gateway's registry outlives an engine that a policy reload drops: the stats source the engine bound
    (its `stats` method) must not keep the engine, and its weights, alive; the engine's gauges just go."""
    import gc
    import weakref

    from prometheus_client import CollectorRegistry

    from engine import EngineMetrics

    class Engine:
        def stats(self) -> None:
            return None

    registry = CollectorRegistry()
    metrics = EngineMetrics.on(registry)
    engine = Engine()
    metrics.bind_stats(engine.stats)
    gone = weakref.ref(engine)
    del engine
    gc.collect()
    assert gone() is None  # before the fix: held by the registry's collector
    assert b"engine_requests_running" not in metrics.render()
