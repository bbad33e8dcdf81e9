from shared.metrics import Registry


def test_render_counter_gauge_histogram():
    reg = Registry()
    c = reg.counter("reqs_total", "Requests.", ["verb", "code"])
    c.inc("GET", "200")
    c.inc("GET", "200")
    c.inc("PUT", "409")
    g = reg.gauge("depth", "Queue depth.", fn=lambda: 4)
    h = reg.histogram("lat_seconds", "Latency.", ["c"], buckets=(0.1, 1.0))
    h.observe(0.1, "ji")
    h.observe(0.5, "ji")
    h.observe(3, "ji")
    text = reg.render()
    assert 'reqs_total{verb="GET",code="200"} 2' in text
    assert 'reqs_total{verb="PUT",code="409"} 1' in text
    assert "depth 4" in text
    assert 'lat_seconds_bucket{c="ji",le="0.1"} 1' in text
    assert 'lat_seconds_bucket{c="ji",le="1"} 2' in text
    assert 'lat_seconds_bucket{c="ji",le="+Inf"} 3' in text
    assert 'lat_seconds_count{c="ji"} 3' in text
    assert 'lat_seconds_sum{c="ji"} 3.6' in text
    assert g.value() == 4
    assert h.count("ji") == 3


def test_label_values_are_escaped():
    reg = Registry()
    reg.counter("x_total", "X.", ["k"]).inc('a"b\n')
    assert 'x_total{k="a\\"b\\n"} 1' in reg.render()
