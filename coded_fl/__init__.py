"""coded-fl core: exact finite-field arithmetic, quantization, masks (no Flower here).

Glossary (used the same way everywhere): n silos, K partitions, s stragglers tolerated,
T colluding silos tolerated, U survivors needed to unmask, p the prime modulus (default
2^31 - 1), d the model size, B the n x K gradient-code matrix over GF(p), S the set of silos
whose reply arrived, a the decoding vector with a^T B_S = 1^T.
"""

from coded_fl.determinism import deterministic_torch, torch_threads
from coded_fl.errors import (
    CodedFLError,
    ConfigurationError,
    DecodingError,
    InputError,
    LocalProtocolError,
    RemoteProtocolError,
)
from coded_fl.field import PrimeField
from coded_fl.pipeline import encode_upload
from coded_fl.prg import expand_field_elements, fresh_seed
from coded_fl.primes import MERSENNE31, check_modulus, is_prime
from coded_fl.quantize import (
    QuantizationConfig,
    QuantizationStats,
    RoundingKey,
    dequantize,
    quantize,
    stochastic_round,
)

__version__ = "0.1.0"

__all__ = [
    "MERSENNE31",
    "CodedFLError",
    "ConfigurationError",
    "DecodingError",
    "InputError",
    "LocalProtocolError",
    "PrimeField",
    "QuantizationConfig",
    "QuantizationStats",
    "RemoteProtocolError",
    "RoundingKey",
    "check_modulus",
    "dequantize",
    "deterministic_torch",
    "encode_upload",
    "expand_field_elements",
    "fresh_seed",
    "is_prime",
    "quantize",
    "stochastic_round",
    "torch_threads",
]
