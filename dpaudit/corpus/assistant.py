"""``builtin:assistant``: a deterministic corpus of voice-assistant utterances with intent labels.

Dupuy et al. (2021) audit intent classifiers trained on smart-home utterances such as "call my
parents at 0123", "refill my aspirin prescription" and "play my favorite movie". Those datasets are
not public, so this module writes utterances in their spirit from a small grammar: 15 intents in
six domains (communication, health, media, shopping, travel, smart home), each a handful of
templates whose slots are filled from lists of names, numbers, places, times, medications and
titles. The grammar reaches millions of distinct utterances (:func:`capacity`), so a demo corpus
of any practical size has no duplicates and no two runs need a download.

Sampling is deterministic in ``seed``: intents are given equal shares (capped at half of an
intent's capacity, the rest spread over the others), the intent sequence is shuffled, and each
utterance picks a template (weighted by the square root of its number of combinations) and
uniform slot values, redrawing repeats. Keeping every intent at most half full keeps redraws rare.

:func:`generate_more` makes further utterances beside a generated corpus, none equal to any of its own,
from a random stream of their own (``dpaudit inject``'s public rows beyond ``--corpus-size``). Both take an
``exclude`` set of normalized texts (``dpaudit inject --exclude``): an utterance equal to one of them after
:func:`dpaudit.corpus.near_duplicates.normalize` is redrawn like a repeat, so that no row drawn is a row of a public
file (another inject directory's ``public.jsonl``). The draw is then a function of the excluded texts: exclude public
rows only (docs/canaries.md, "Splits, labels and randomness").

References:
    Dupuy, Arava, Gupta, Rumshisky. "An Efficient DP-Federated Learning Mechanism ..." (2021);
    see Dupuy et al. 2021, the section on datasets.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import string
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from dpaudit.corpus.near_duplicates import normalize

#: Version of the grammar; bump it whenever an edit changes the utterances a seed produces.
GENERATOR_VERSION = 1

# -- slot fillers ----------------------------------------------------------------------------

_FIRST_NAMES = (
    "aaron abby adam aisha alex alice amara amir ana andre angela anika ben bianca carlos chen chloe "
    "daniel dara david diego elena eli emma ethan fatima felix grace hana hassan ian iris ivan jack "
    "james jasmine javier jin john julia kai karen kenji lars laura leo lina lucas maria mark maya mei "
    "miguel mohammed nadia naomi nina noah olga omar oscar paul priya rachel rafael rosa ruth sam "
    "sara sofia tariq tom uma victor wei yara yusuf zoe"
).split()
_RELATIONS = (
    "mom",
    "dad",
    "my parents",
    "my sister",
    "my brother",
    "grandma",
    "grandpa",
    "my wife",
    "my husband",
    "my son",
    "my daughter",
    "my aunt",
    "my uncle",
    "my boss",
    "my doctor",
    "the babysitter",
    "my neighbor",
    "my best friend",
)
_CONTACTS = tuple(_FIRST_NAMES) + _RELATIONS
#: Possessive forms ("mom's", "my parents'") so templates need not glue "'s" onto plurals.
_CONTACTS_POSSESSIVE = tuple(c + "'" if c.endswith("parents") else c + "'s" for c in _CONTACTS)
_SURNAMES = (
    "adams alvarez baker brown chen cohen davis diaz evans garcia gupta hall harris ito jones kim "
    "lee lopez martin miller moore nguyen novak okafor patel perez reyes rossi sato schmidt singh "
    "smith taylor walker wang white wilson young zhang"
).split()
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAYS = (
    ("today", "tomorrow", "tonight", "this weekend")
    + tuple(f"on {d}" for d in _WEEKDAYS)
    + tuple(f"next {d}" for d in _WEEKDAYS)
)
_CLOCKS = tuple(f"{h}{m} {ap}" for ap in ("am", "pm") for h in range(1, 13) for m in ("", ":15", ":30", ":45"))
_WHEN = tuple(f"{d} at {c}" for d in _DAYS for c in _CLOCKS) + tuple(f"at {c}" for c in _CLOCKS) + _DAYS
_MONTHS = ("january february march april may june july august september october november december").split()
_DATES = tuple(f"on {m} {d}" for m in _MONTHS for d in range(1, 29)) + _DAYS
_PHONES = tuple(f"{a:03d} {b:04d}" for a, b in zip(range(200, 1000, 7), range(1000, 10000, 79)))
_MESSAGES = (
    "i am running late",
    "i will be home soon",
    "dinner is ready",
    "call me back",
    "happy birthday",
    "i love you",
    "the meeting moved to three",
    "can you pick up the kids",
    "i am at the store",
    "do we need milk",
    "i landed safely",
    "see you tonight",
    "the package arrived",
    "thank you",
    "i left my keys at home",
    "on my way",
    "traffic is terrible",
    "let us meet at noon",
    "are you awake",
    "the game starts at eight",
    "good luck today",
    "bring an umbrella",
    "i will call you later",
    "where are you",
    "the doctor called",
    "feed the cat",
)
_MEDICATIONS = (
    "aspirin",
    "ibuprofen",
    "metformin",
    "lisinopril",
    "atorvastatin",
    "amoxicillin",
    "insulin",
    "levothyroxine",
    "omeprazole",
    "amlodipine",
    "albuterol",
    "prednisone",
    "sertraline",
    "gabapentin",
    "losartan",
    "simvastatin",
    "warfarin",
    "cetirizine",
    "loratadine",
    "vitamin d",
    "folic acid",
    "iron supplement",
    "allergy medicine",
    "blood pressure medication",
    "cholesterol pills",
    "inhaler",
    "eye drops",
    "antibiotics",
    "melatonin",
    "fish oil",
)
_DOSES = (
    "one pill",
    "two pills",
    "half a tablet",
    "ten milligrams",
    "twenty milligrams",
    "five milliliters",
    "one capsule",
    "two puffs",
    "a teaspoon",
    "one dose",
)
_PHARMACIES = (
    "the pharmacy",
    "walgreens",
    "cvs",
    "the corner pharmacy",
    "the hospital pharmacy",
    "the mail order pharmacy",
    "rite aid",
    "my usual pharmacy",
)
_SPECIALISTS = (
    "dentist",
    "cardiologist",
    "dermatologist",
    "pediatrician",
    "eye doctor",
    "physical therapist",
    "family doctor",
    "allergist",
)
_MOVIES = (
    "the matrix",
    "casablanca",
    "jaws",
    "the godfather",
    "toy story",
    "finding nemo",
    "the lion king",
    "star wars",
    "jurassic park",
    "titanic",
    "inception",
    "frozen",
    "alien",
    "the sound of music",
    "back to the future",
    "the wizard of oz",
    "rocky",
    "gladiator",
    "spirited away",
    "the princess bride",
    "ghostbusters",
    "the incredibles",
    "coco",
    "heat",
    "amelie",
    "vertigo",
    "psycho",
    "the shining",
    "groundhog day",
    "moana",
    "shrek",
    "black panther",
    "wall e",
    "ratatouille",
    "goodfellas",
    "the terminator",
    "mulan",
    "my favorite movie",
    "the new comedy",
    "that documentary about whales",
)
_SHOWS = (
    "the news",
    "the cooking show",
    "the weather channel",
    "the football game",
    "cartoons",
    "the latest episode",
    "my recorded shows",
    "the nature documentary",
    "the quiz show",
    "the late show",
    "the baseball game",
    "the basketball game",
)
_SONGS = (
    "yesterday",
    "imagine",
    "hey jude",
    "let it be",
    "bohemian rhapsody",
    "hotel california",
    "dancing queen",
    "purple rain",
    "respect",
    "superstition",
    "halo",
    "hello",
    "shallow",
    "wonderwall",
    "clocks",
    "yellow",
    "africa",
    "jolene",
    "landslide",
    "vogue",
    "thriller",
    "happy",
    "royals",
    "skyfall",
    "believer",
    "bad guy",
    "levitating",
    "blinding lights",
    "my favorite song",
    "something relaxing",
    "the song from this morning",
)
_ARTISTS = (
    "the beatles",
    "queen",
    "adele",
    "beyonce",
    "prince",
    "madonna",
    "abba",
    "coldplay",
    "taylor swift",
    "bob marley",
    "miles davis",
    "nina simone",
    "stevie wonder",
    "aretha franklin",
    "elton john",
    "fleetwood mac",
    "dolly parton",
    "billie eilish",
    "ed sheeran",
    "drake",
    "shakira",
    "bts",
    "the rolling stones",
    "john coltrane",
    "johnny cash",
)
_GENRES = (
    "jazz",
    "classical",
    "rock",
    "pop",
    "country",
    "hip hop",
    "reggae",
    "blues",
    "lofi",
    "folk",
    "electronic",
    "soul",
    "latin",
    "kids",
    "workout",
    "sleep",
)
_PLAYLISTS = (
    "my morning playlist",
    "my workout mix",
    "road trip songs",
    "dinner music",
    "the top hits",
    "my liked songs",
    "focus music",
    "party mix",
    "rainy day songs",
    "my discover playlist",
)
_ROOMS = (
    "living room",
    "kitchen",
    "bedroom",
    "bathroom",
    "office",
    "hallway",
    "basement",
    "garage",
    "dining room",
    "nursery",
    "guest room",
    "porch",
    "kids room",
    "attic",
)
_DEVICES = ("tv", "speaker", "tablet", "phone", "laptop", "soundbar", "display")
_ITEMS = (
    "paper towels",
    "batteries",
    "coffee beans",
    "dish soap",
    "toothpaste",
    "shampoo",
    "dog food",
    "cat litter",
    "trash bags",
    "laundry detergent",
    "olive oil",
    "rice",
    "pasta",
    "eggs",
    "milk",
    "bread",
    "bananas",
    "apples",
    "diapers",
    "light bulbs",
    "printer ink",
    "phone charger",
    "headphones",
    "yoga mats",
    "tea",
    "orange juice",
    "cereal",
    "peanut butter",
    "sunscreen",
    "vitamins",
    "socks",
    "water bottles",
    "hand soap",
    "sponges",
    "aluminum foil",
    "ice cream",
    "birthday cards",
    "flowers",
    "ground coffee",
    "oat milk",
)
_QUANTITIES = (
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "a dozen",
    "a pack of",
    "a box of",
    "a bag of",
    "ten",
    "twelve",
    "a case of",
    "a couple of",
    "some",
    "more",
)
_ORDER_NUMBERS = tuple(f"{n:05d}" for n in range(10007, 100000, 997))
_CITIES = (
    "new york",
    "boston",
    "chicago",
    "seattle",
    "denver",
    "austin",
    "miami",
    "atlanta",
    "dallas",
    "houston",
    "phoenix",
    "portland",
    "san diego",
    "san francisco",
    "los angeles",
    "las vegas",
    "salt lake city",
    "minneapolis",
    "detroit",
    "philadelphia",
    "pittsburgh",
    "baltimore",
    "washington",
    "nashville",
    "new orleans",
    "orlando",
    "tampa",
    "charlotte",
    "raleigh",
    "st louis",
    "kansas city",
    "toronto",
    "montreal",
    "vancouver",
    "mexico city",
    "london",
    "paris",
    "berlin",
    "madrid",
    "rome",
    "lisbon",
    "amsterdam",
    "dublin",
    "vienna",
    "prague",
    "zurich",
    "stockholm",
    "oslo",
    "athens",
    "istanbul",
    "cairo",
    "nairobi",
    "lagos",
    "dubai",
    "mumbai",
    "delhi",
    "bangkok",
    "singapore",
    "hong kong",
    "tokyo",
    "seoul",
    "beijing",
    "shanghai",
    "sydney",
    "melbourne",
    "auckland",
    "sao paulo",
    "buenos aires",
    "lima",
    "bogota",
)
_PLACES = (
    "the airport",
    "the train station",
    "the nearest gas station",
    "the hospital",
    "the office",
    "the gym",
    "the library",
    "the mall",
    "the beach",
    "downtown",
    "the stadium",
    "the zoo",
    "the museum",
    "grandma's house",
    "the grocery store",
    "the pharmacy",
    "the post office",
    "the nearest coffee shop",
    "the park",
    "the school",
    "the dentist",
    "city hall",
    "the bus stop",
    "the hotel",
    "the restaurant",
    "work",
    "home",
)
_TEMPERATURES = tuple(str(t) for t in range(60, 86))
_PERCENTS = tuple(str(p) for p in range(10, 101, 10))
_COLORS = ("warm white", "cool white", "red", "blue", "green", "purple", "orange", "pink", "yellow")


def _slot_names(template: str) -> list[str]:
    return [field for _, field, _, _ in string.Formatter().parse(template) if field]


@dataclass(frozen=True, kw_only=True)
class Intent:
    """One intent: its domain, and templates whose ``{slot}`` fields name lists in :data:`SLOTS`."""

    name: str
    domain: str
    templates: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.templates:
            raise ValueError(f"templates must be non-empty, got {self.templates!r}.")
        for template in self.templates:
            for slot in _slot_names(template):
                if slot not in SLOTS:
                    raise ValueError(f"template {template!r} names unknown slot {slot!r}.")


SLOTS: dict[str, Sequence[str]] = {
    "contact": _CONTACTS,
    "contact2": _CONTACTS,
    "contacts": _CONTACTS_POSSESSIVE,
    "surname": _SURNAMES,
    "when": _WHEN,
    "day": _DAYS,
    "clock": _CLOCKS,
    "date": _DATES,
    "phone": _PHONES,
    "message": _MESSAGES,
    "medication": _MEDICATIONS,
    "dose": _DOSES,
    "pharmacy": _PHARMACIES,
    "specialist": _SPECIALISTS,
    "movie": _MOVIES,
    "show": _SHOWS,
    "song": _SONGS,
    "artist": _ARTISTS,
    "genre": _GENRES,
    "playlist": _PLAYLISTS,
    "room": _ROOMS,
    "device": _DEVICES,
    "item": _ITEMS,
    "quantity": _QUANTITIES,
    "order": _ORDER_NUMBERS,
    "city": _CITIES,
    "city2": _CITIES,
    "place": _PLACES,
    "temperature": _TEMPERATURES,
    "percent": _PERCENTS,
    "color": _COLORS,
}

INTENTS: tuple[Intent, ...] = (
    Intent(
        name="call_contact",
        domain="communication",
        templates=(
            "call {contact}",
            "call {contact} {when}",
            "call {contact} at {phone}",
            "dial {phone} {when}",
            "phone {contact} on speaker {when}",
            "can you call {contact} on the {device}",
            "start a video call with {contact} {when}",
            "ring {contact} in the {room}",
        ),
    ),
    Intent(
        name="send_message",
        domain="communication",
        templates=(
            "text {contact} {message}",
            "send a message to {contact} saying {message}",
            "tell {contact} that {message}",
            "message {contact} and {contact2} {message}",
            "remind {contact} {when} that {message}",
            "reply to {contact} {message}",
        ),
    ),
    Intent(
        name="refill_prescription",
        domain="health",
        templates=(
            "refill my {medication} prescription",
            "refill my {medication} prescription at {pharmacy}",
            "order a refill of {medication} for {contact}",
            "i need more {medication} from {pharmacy} {when}",
            "is my {medication} refill ready at {pharmacy}",
            "ask {pharmacy} to refill {contacts} {medication}",
            "send my {medication} prescription to {pharmacy} for pickup {when}",
        ),
    ),
    Intent(
        name="medication_reminder",
        domain="health",
        templates=(
            "remind me to take {dose} of {medication} {when}",
            "set a reminder for my {medication} {when}",
            "remind {contact} to take {medication} {when}",
            "did i take my {medication} {day}",
            "every day at {clock} remind me to take {dose} of {medication}",
        ),
    ),
    Intent(
        name="book_appointment",
        domain="health",
        templates=(
            "book an appointment with doctor {surname} {when}",
            "schedule a visit to the {specialist} {when}",
            "make an appointment with the {specialist} for {contact} {when}",
            "cancel my appointment with doctor {surname} {day}",
            "move my {specialist} appointment to {when}",
            "when is {contacts} appointment with doctor {surname}",
        ),
    ),
    Intent(
        name="play_movie",
        domain="media",
        templates=(
            "play {movie}",
            "play {movie} on the {room} {device}",
            "put on {movie} for {contact}",
            "resume {movie} in the {room}",
            "watch {movie} {when}",
            "record {show} {when}",
            "turn on {show} in the {room}",
            "find {movie} and play it on the {device}",
        ),
    ),
    Intent(
        name="play_music",
        domain="media",
        templates=(
            "play {song} by {artist}",
            "play some {genre} music in the {room}",
            "shuffle songs by {artist}",
            "play {playlist} on the {room} speaker",
            "play {song} for {contact}",
            "add {song} by {artist} to {playlist}",
            "play {artist} radio in the {room} at {percent} percent volume",
        ),
    ),
    Intent(
        name="add_to_cart",
        domain="shopping",
        templates=(
            "add {quantity} {item} to my cart",
            "order {quantity} {item} for delivery {when}",
            "buy {item} and have it delivered to {contact}",
            "put {item} on my shopping list",
            "reorder {item} from my last order",
            "add {item} to {contacts} shopping list",
        ),
    ),
    Intent(
        name="track_order",
        domain="shopping",
        templates=(
            "where is my {item} order",
            "track order number {order}",
            "when will my {item} arrive",
            "has order {order} shipped",
            "cancel order {order}",
            "return the {item} from order {order}",
            "did {contacts} {item} get delivered {day}",
        ),
    ),
    Intent(
        name="book_flight",
        domain="travel",
        templates=(
            "book a flight from {city} to {city2} {date}",
            "find flights to {city} {date}",
            "what is the cheapest flight from {city} to {city2}",
            "book two tickets to {city} for {contact} {date}",
            "is my flight to {city} on time",
            "change my flight to {city} to {date}",
            "book a hotel in {city} {date}",
        ),
    ),
    Intent(
        name="get_directions",
        domain="travel",
        templates=(
            "navigate to {place}",
            "how do i get to {place} from {place}",
            "how long is the drive to {city}",
            "directions to {place} in {city}",
            "what is the traffic like on the way to {place} {when}",
            "take me to {contacts} house",
            "pick up {contact} at {place} {when}",
            "find a route to {place} that avoids tolls",
        ),
    ),
    Intent(
        name="set_thermostat",
        domain="smart home",
        templates=(
            "set the thermostat to {temperature} degrees",
            "set the {room} temperature to {temperature}",
            "make it {temperature} degrees in the {room} {when}",
            "what is the temperature in the {room}",
            "turn the heat up to {temperature} {when}",
            "cool the {room} down to {temperature} degrees",
        ),
    ),
    Intent(
        name="control_lights",
        domain="smart home",
        templates=(
            "turn on the {room} lights",
            "turn off the {room} lights",
            "dim the {room} lights to {percent} percent",
            "set the {room} lights to {color}",
            "turn the {room} lights {color} at {percent} percent",
            "turn off all the lights {when}",
            "switch on the {room} lamp {when}",
        ),
    ),
    Intent(
        name="set_alarm",
        domain="smart home",
        templates=(
            "wake me up {when}",
            "set an alarm for {clock} {day}",
            "set a timer for {percent} minutes",
            "cancel my alarm {when}",
            "snooze the alarm in the {room}",
            "set an alarm called {message} {when}",
        ),
    ),
    Intent(
        name="lock_doors",
        domain="smart home",
        templates=(
            "lock the front door",
            "lock the {room} door {when}",
            "is the {room} door locked",
            "unlock the door for {contact}",
            "lock all the doors {when}",
            "open the garage for {contact} {when}",
            "show the {room} camera on the {device}",
        ),
    ),
)

DOMAINS: tuple[str, ...] = tuple(sorted({intent.domain for intent in INTENTS}))


def _template_capacity(template: str) -> int:
    return math.prod(len(SLOTS[slot]) for slot in _slot_names(template))


@cache
def intent_capacities() -> dict[str, int]:
    """Distinct (template, slot values) combinations per intent: the utterances it can reach."""
    return {intent.name: sum(_template_capacity(t) for t in intent.templates) for intent in INTENTS}


def capacity() -> int:
    """Total number of (template, slot values) combinations over all intents."""
    return sum(intent_capacities().values())


def max_size() -> int:
    """The largest ``n`` :func:`generate` accepts: half of every intent's capacity."""
    return sum(c // 2 for c in intent_capacities().values())


def intent_quotas(n: int) -> dict[str, int]:
    """How many of ``n`` utterances each intent gets: equal shares, capped at half its capacity.

    Water-filling: intents whose half-capacity is below the equal share get their cap, and the
    remainder is shared equally among the rest (earlier intents take the rounding remainder).
    """
    if n < 0 or n > max_size():
        raise ValueError(f"n must be in [0, {max_size()}], got {n}.")
    return _water_fill(n, {name: c // 2 for name, c in intent_capacities().items()})


def _water_fill(n: int, caps: dict[str, int]) -> dict[str, int]:
    """``n`` shared equally over the intents, none above its cap (``n`` at most the caps' sum)."""
    quotas: dict[str, int] = {}
    open_names = [intent.name for intent in INTENTS]
    remaining = n
    while open_names:
        share = remaining // len(open_names)
        capped = [name for name in open_names if caps[name] <= share]
        if not capped:
            extra = remaining - share * len(open_names)
            for i, name in enumerate(open_names):
                quotas[name] = share + (1 if i < extra else 0)
            break
        for name in capped:
            quotas[name] = caps[name]
            remaining -= caps[name]
            open_names.remove(name)
    return {intent.name: quotas[intent.name] for intent in INTENTS}


def max_more(after: int) -> int:
    """The largest ``n`` :func:`generate_more` accepts beside the first ``after`` utterances."""
    return max_size() - after


def more_quotas(n: int, *, after: int) -> dict[str, int]:
    """How many of ``n`` further utterances each intent gets beside :func:`intent_quotas` of ``after``: equal
    shares again, each intent's two parts together capped at half its capacity (so redraws stay rare)."""
    if after < 0 or after > max_size():
        raise ValueError(f"after must be in [0, {max_size()}], got {after}.")
    if n < 0 or n > max_more(after):
        raise ValueError(f"n must be in [0, {max_more(after)}], got {n}.")
    taken = intent_quotas(after)
    return _water_fill(n, {name: c // 2 - taken[name] for name, c in intent_capacities().items()})


class _IntentSampler:
    """Turns one row of uniforms into a uniform (template, slot values) utterance of one intent.

    Randomness arrives as rows of floats in [0, 1) drawn in blocks, because one numpy call per
    slot would dominate the cost of a million-utterance corpus.
    """

    def __init__(self, intent: Intent) -> None:
        self.intent = intent
        self.slots = [[(slot, SLOTS[slot]) for slot in _slot_names(t)] for t in intent.templates]
        # Templates in proportion to the square root of their capacity: uniform over combinations
        # would make nearly every utterance carry a time ("call mom" is common in real traffic),
        # uniform over templates would exhaust the small ones. Repeats are redrawn by the caller.
        weights = [math.sqrt(_template_capacity(t)) for t in intent.templates]
        total = sum(weights)
        self.cumulative = [sum(weights[: i + 1]) / total for i in range(len(weights))]

    def draw(self, u: Sequence[float]) -> str:
        k = min(bisect.bisect_right(self.cumulative, u[0]), len(self.cumulative) - 1)
        values = {slot: fillers[int(x * len(fillers))] for (slot, fillers), x in zip(self.slots[k], u[1:])}
        return self.intent.templates[k].format(**values)


_MAX_SLOTS = max(len(_slot_names(t)) for intent in INTENTS for t in intent.templates)
_BLOCK = 4096
#: The random stream of :func:`generate_more` (``generate``'s is the version alone).
_MORE_STREAM = 1


def _rng(seed: int, *stream: int) -> np.random.Generator:
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}.")
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(GENERATOR_VERSION, *stream)))


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def generate(n: int, seed: int, *, exclude: Collection[str] = frozenset()) -> Iterator[dict[str, str]]:
    """Yield ``n`` distinct utterances as ``{"text": ..., "label": intent}``, deterministically.

    Args:
        n: how many utterances, at most :func:`max_size`.
        seed: non-negative seed; the same ``(n, seed, exclude)`` always yields the same sequence (an empty
            ``exclude`` the sequence of ``(n, seed)`` alone).
        exclude: normalized texts (:func:`~dpaudit.corpus.near_duplicates.normalize`) never to yield: an
            utterance equal to one after normalization is redrawn like a repeat.

    Raises:
        ValueError: if ``n`` or ``seed`` is out of range.
    """
    rng = _rng(seed)
    return _draw(intent_quotas(n), rng, set(), exclude)


def generate_more(n: int, seed: int, *, after: int, exclude: Collection[str] = frozenset()) -> Iterator[dict[str, str]]:
    """Yield ``n`` further utterances, distinct from each other and from every one of ``generate(after, seed)``.

    For a split that must be disjoint from a generated corpus (``dpaudit inject``'s public rows beyond
    ``--corpus-size``): the corpus is regenerated here to know its texts, and the further utterances come
    from a random stream of their own, so ``generate(after, seed)`` itself is unchanged by them. Intents
    get equal shares of ``n`` (:func:`more_quotas`).

    ``exclude`` applies to both: the corpus is regenerated with it, and no further utterance is in it either.

    Raises:
        ValueError: if ``n``, ``after`` or ``seed`` is out of range (at most :func:`max_more` of ``after``).
    """
    quotas = more_quotas(n, after=after)
    rng = _rng(seed, _MORE_STREAM)
    seen = {_key(row["text"]) for row in generate(after, seed, exclude=exclude)}
    return _draw(quotas, rng, seen, exclude)


def _draw(
    quotas: dict[str, int], rng: np.random.Generator, seen: set[bytes], exclude: Collection[str] = frozenset()
) -> Iterator[dict[str, str]]:
    """The utterances of ``quotas`` in a shuffled intent order, none of whose keys is in ``seen`` and none whose
    normalized text is in ``exclude``."""
    n = sum(quotas.values())
    order = np.repeat(np.arange(len(INTENTS), dtype=np.int16), [quotas[i.name] for i in INTENTS])
    rng.shuffle(order)
    samplers = [_IntentSampler(intent) for intent in INTENTS]
    for start in range(0, n, _BLOCK):
        block = rng.random((min(_BLOCK, n - start), 1 + _MAX_SLOTS)).tolist()
        for k, u in zip(order[start : start + len(block)].tolist(), block):
            sampler = samplers[k]
            for _ in range(10_000):
                text = sampler.draw(u)
                key = _key(text)
                if key not in seen and not (exclude and normalize(text) in exclude):
                    seen.add(key)
                    break
                u = rng.random(1 + _MAX_SLOTS).tolist()  # a repeat: redraw this one utterance
            else:  # pragma: no cover - impossible while each intent is at most half full
                raise RuntimeError(f"intent {sampler.intent.name} ran out of distinct utterances.")
            yield {"text": text, "label": sampler.intent.name}


def describe(n: int, seed: int, *, more: int = 0) -> str:
    """A one-line description of a generated corpus (and of ``more`` utterances generated beside it), for manifests."""
    beside = f" and {more} more beside them" if more else ""
    return (
        f"dpaudit.corpus.assistant v{GENERATOR_VERSION} (seed {seed}, {n} utterances{beside}, {len(INTENTS)} intents)"
    )
