# SPDX-License-Identifier: MIT
# The memprof package with no profiler attached (tests/python/test_python.c):
# it binds the build tree's libmemprof, markers work and cost nothing to the
# program's behaviour, errors are Python exceptions with the library's text.
import memprof

assert not memprof.attached()
assert memprof.library.endswith("libmemprof.so.0"), memprof.library
assert memprof.library_version.count(".") == 2

with memprof.kernel("a", inputs=(2, 3)) as k:
    assert k.name == "a"
    with memprof.kernel("b", inputs=[(1,), (2, 2)], outputs=[(4,)]):
        pass


@memprof.kernel("decorated")
def f(x):
    """doc"""
    return x + 1


assert f(1) == 2 and f.__name__ == "f" and f.__doc__ == "doc"

with memprof.phase("load"):
    with memprof.phase("inference"):
        pass
memprof.phase("plain")  # a plain call sets the phase until the next one

with memprof.tag("t"):
    pass

p = memprof.Pool("arena")
p.alloc(4096, 128)
p.free(4096)
p.reset()
assert memprof.Pool("arena").id == p.id
assert memprof.dropped() == 0


def raises(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (fn, exc))


raises(TypeError, memprof.kernel, 3)
raises(ValueError, memprof.kernel, "")
raises(ValueError, memprof.kernel, "x", inputs=[(1,) * 9])
raises(ValueError, memprof.kernel, "x", inputs=[(1,)] * 17)
raises(TypeError, memprof.kernel, "x", inputs=[("a",)])
raises(TypeError, memprof.kernel("x"), 1, 2)
# an end with nothing open: the library's error, as memprof.Error (OSError)
e = raises(memprof.Error, memprof.kernel("x").__exit__, None, None, None)
assert isinstance(e, OSError) and e.errno and e.strerror, e
print("unit.py: ok")
