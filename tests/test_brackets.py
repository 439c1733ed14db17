"""Bracket matching over source text, both ways."""

from analyzer.brackets import closing, enclosing_openers, opening
from analyzer.ptx_reader import _strip_return_type


def test_opening_is_the_mirror_of_closing():
    text = "f(a, g(b), (c))"
    last = len(text) - 1
    assert opening(text, last, "(", ")") == 1 and closing(text, 1, "(", ")") == last
    assert opening(text, text.index("b)") + 1, "(", ")") == text.index("g(") + 1
    assert opening("a)", 1, "(", ")") == -1


def test_enclosing_openers_are_the_blocks_holding_a_position_innermost_first():
    text = "void k() { if (x) { y = 1; } { z(); } }"
    pos = text.index("z()")
    assert list(enclosing_openers(text, pos, "{", "}")) == [text.index("{ z()"), text.index("{ if")]
    assert list(enclosing_openers(text, text.index("void"), "{", "}")) == []


def test_a_templates_return_type_is_stripped_at_its_own_parenthesis():
    assert _strip_return_type("void ns::k<float, 256>(float*)") == "ns::k<float, 256>(float*)"
    assert _strip_return_type("void k(void (*)(int))") == "k(void (*)(int))"
