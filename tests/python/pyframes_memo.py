# SPDX-License-Identifier: MIT
# Allocations whose Python frames differ from those of the allocation just
# before in one thing only (tests/python/test_pyframes.c, memo_never_stale):
# the frame walker keeps each thread's frames of its last walks, and must
# not give one of them for another line, another function in the same frame
# slot, or another code object made at a freed one's address. Each
# allocates a bytearray of a size of its own. The lines marked "@NAME" are
# the ones the test looks for.


def two_lines():
    a = bytearray(11 << 20)  # @memo_line_a
    b = bytearray(12 << 20)  # @memo_line_b
    return a, b


def first():
    return bytearray(13 << 20)  # @memo_first


def second():
    return bytearray(14 << 20)  # @memo_second


def in_turn():
    # first's frame, then second's at its address
    a = first()  # @memo_in_turn_first
    b = second()  # @memo_in_turn_second
    return a, b


def run_code(code, ns):
    exec(code, ns)  # @memo_exec


def fresh_code():
    # code objects too big for pymalloc: the second one is malloc()'s
    # chunk of the first, freed just before; run from the same frame
    # slot, the same instruction at the same address
    pad = "y = 0\n" * 100
    ns = {}
    c = compile("x = bytearray(15 << 20)\n" + pad, "<memo-one>", "exec")
    old = id(c)
    run_code(c, ns)  # @memo_fresh_one
    del c
    c = compile("\nx = bytearray(16 << 20)\n" + pad, "<memo-two>", "exec")
    same = id(c) == old
    run_code(c, ns)  # @memo_fresh_two
    return same


def same_name():
    # as fresh_code, but both sources compiled under one file name
    # object: the code objects' names are the same objects, only their
    # line tables differ
    pad = "y = 0\n" * 100
    name = "<memo-same>"
    ns = {}
    c = compile("x = bytearray(17 << 20)\n" + pad, name, "exec")
    run_code(c, ns)  # @memo_same_one
    del c
    c = compile("\nx = bytearray(18 << 20)\n" + pad, name, "exec")
    run_code(c, ns)  # @memo_same_two


held = [two_lines()]  # @memo_two_lines
held.append(in_turn())  # @memo_in_turn
same_address = fresh_code()  # @memo_fresh_code
same_name()  # @memo_same_name
print("code at the same address:", same_address, flush=True)
print("memo done", flush=True)
