"""The language of a text: a document's stamp, a question's route, the language of a refusal.

py3langid (a maintained fork of langid.py, its model in the wheel, numpy only) rather than a hand-written
detector. Its labels are restricted to the languages a Snowball stemmer exists for, which is what the
lexical index can serve, and which makes short questions far less likely to come out as Breton or Latin.
"""

from __future__ import annotations

import re
from functools import lru_cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

# ISO 639-1 code -> Snowball (PyStemmer) algorithm: the languages citerag detects and stems.
SNOWBALL = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek",
    "en": "english", "es": "spanish", "et": "estonian", "eu": "basque", "fi": "finnish", "fr": "french",
    "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian",
    "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil", "tr": "turkish",
}
DEFAULT = "en"
# Below this many letters a guess is noise ("apt-get", "ls -l"): the default language stands.
_MIN_LETTERS = 12
# A text is read in slices this long: a document's language is its opening's, detection stays O(1).
_SAMPLE = 20_000
_LETTERS = re.compile(r"[^\W\d_]")


@lru_cache(maxsize=1)
def _identifier() -> LanguageIdentifier:
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(sorted(SNOWBALL))
    return identifier


def detect(text: str, default: str = DEFAULT) -> str:
    """ISO 639-1 code of the text's language; `default` when the text has too few letters to tell."""
    sample = text[:_SAMPLE]
    if len(_LETTERS.findall(sample)) < _MIN_LETTERS:
        return default
    code, probability = _identifier().classify(sample)
    return str(code) if probability >= 0.5 else default


def stemmer_name(code: str) -> str | None:
    """The Snowball algorithm for a language code, None where there is none."""
    return SNOWBALL.get(code)
