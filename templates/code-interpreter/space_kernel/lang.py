"""Language names and the client-input error type (light: the exec client imports it)."""

LANGUAGES = ("python", "javascript", "bash")
ALIASES = {"js": "javascript", "node": "javascript", "py": "python", "python3": "python",
           "sh": "bash", "shell": "bash"}


class RequestError(Exception):
    """Bad input from a client: carries the HTTP status and an error code."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def normalize_language(language):
    """The canonical language name; None means python. Raises RequestError (400)."""
    if language is None:
        return "python"
    if not isinstance(language, str):
        raise RequestError(400, "invalid_argument", "language must be a string")
    lang = language.strip().lower()
    lang = ALIASES.get(lang, lang) or "python"
    if lang not in LANGUAGES:
        raise RequestError(400, "invalid_argument",
                           "unsupported language %r: supported are python, javascript (js), bash"
                           % language)
    return lang
