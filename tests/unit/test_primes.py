import pytest
import sympy

from coded_fl.errors import ConfigurationError
from coded_fl.primes import MERSENNE31, check_modulus, is_prime


def test_is_prime_matches_sympy_on_small_and_edge_values():
    values = [*range(0, 2000), 2**31 - 1, 2**31 + 1, 2**61 - 1, 3215031751, 341550071728321]
    for v in values:
        assert is_prime(v) == sympy.isprime(v), v


@pytest.mark.parametrize("p", [MERSENNE31, 2**31 - 19, 101, 3])
def test_check_modulus_accepts_primes_below_2_31(p):
    assert check_modulus(p) == p


@pytest.mark.parametrize(
    ("p", "words"),
    [
        (2**31, "too large"),
        (2**61 - 1, "too large"),
        (2**31 - 3, "not an odd prime"),
        (2, "not an odd prime"),
        (1, "not an odd prime"),
        (-7, "not an odd prime"),
        (7.0, "must be an int"),
        (True, "must be an int"),
    ],
)
def test_check_modulus_rejects_with_a_message_that_says_what_to_use(p, words):
    with pytest.raises(ConfigurationError, match=words) as err:
        check_modulus(p)
    if "prime" in words or "large" in words:
        assert "2**31-1" in str(err.value)
