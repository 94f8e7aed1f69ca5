"""The entity-type vocabularies of augmentation, one per benchmark, and the rule that picks one.

Why two: an intra-category distractor is "another thing of the same kind", so the kinds must be the
ones the benchmark asks about. InfoSeek's questions name twenty broad kinds ("this building", "this
bird"); the authors' script lists them (place/location disabled) and the released augmented file
uses exactly those labels, so `infoseek` is that list, unchanged. E-VQA's questions come from two
sources with much finer kinds — Google Landmarks ("this castle", "this lighthouse", "this
ballpark") and iNaturalist ("this moth", "this reptile", "this tree") — and the authors' E-VQA
script has about sixty labels (species, tree, church, ...). Its assignments are not in the released
files, so `evqa` is kbvqa's reconstruction: kinds of landmark and of organism in general English
use, each canonical type with the other nouns that name it ("basilica" and "chapel" are churches,
"lizard" and "gecko" reptiles). The surface noun is kept in the rewritten question ("the chapel on
the left"); the canonical type only groups distractors.

E-VQA's vocabulary also reads a noun phrase's head ("this railway station" is a station, "this
nature reserve" a reserve: up to two words before a vocabulary noun) and the "what kind of tree is
this?" form. InfoSeek's keeps the authors' plain "this <type>" reading, so its count stays theirs.

Families (natural / built / ...) steer the inter-category distractor to another family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kbvqa.data.evqa import EVQA_DATASETS

__all__ = ["EVQA", "EVQA_DATASETS", "INFOSEEK", "VOCABULARIES", "Vocabulary", "all_families", "vocabulary_name"]


@dataclass(frozen=True)
class Vocabulary:
    """One benchmark's type vocabulary: canonical types, other nouns naming each, their families, and
    how the question is read (`modifiers`: words allowed before the noun; `is_this`: "what kind of
    <type> is this?")."""

    name: str
    types: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    families: Mapping[str, str] = field(default_factory=dict)
    modifiers: int = 0
    is_this: bool = False


def _build(name: str, table: Mapping[str, tuple[str, str]], **how) -> Vocabulary:
    """A vocabulary from `type -> (family, "other nouns, comma separated")`."""
    aliases: dict[str, str] = {}
    for t, (_, nouns) in table.items():
        for n in (x.strip() for x in nouns.split(",")):
            if n and n != t:
                if n in aliases or n in table:
                    raise ValueError(f"{name} vocabulary: {n!r} names two types")
                aliases[n] = t
    return Vocabulary(name, tuple(table), aliases, {t: fam for t, (fam, _) in table.items()}, **how)


# The authors' InfoSeek list (ara-protocol §2), with the families kbvqa has used for it.
INFOSEEK = _build("infoseek", {
    "building": ("structure", ""), "bridge": ("structure", ""), "facility": ("structure", ""),
    "park": ("structure", ""), "mountain": ("landform", ""), "lake": ("landform", ""),
    "island": ("landform", ""), "city": ("settlement", ""), "town": ("settlement", ""),
    "village": ("settlement", ""), "vehicle": ("vehicle", ""), "aircraft": ("vehicle", ""),
    "plant": ("flora", ""), "bird": ("fauna", ""), "animal": ("fauna", ""), "insect": ("fauna", ""),
    "fish": ("fauna", ""), "fungus": ("flora", ""), "food": ("food", ""), "material": ("material", ""),
})

# kbvqa's E-VQA reconstruction: landmark kinds (Google Landmarks) and organism kinds (iNaturalist).
# A noun that is also a common modifier of another kind ("cricket ground") is left out.
EVQA = _build("evqa", {
    # built: worship, defence, residence
    "church": ("structure", "cathedral, basilica, chapel, kirk, minster, parish church, oratory"),
    "monastery": ("structure", "abbey, priory, convent, friary, nunnery, hermitage, lavra"),
    "mosque": ("structure", "masjid, madrasa, madrassa, jami"),
    "temple": ("structure", "shrine, pagoda, stupa, dargah, gurdwara, mandir, wat, sanctuary"),
    "synagogue": ("structure", ""),
    "castle": ("structure", "fortress, fort, citadel, kremlin, fortification, stronghold, alcazar, bastion"),
    "palace": ("structure", "chateau, château"),
    "house": ("structure", "villa, manor, mansion, cottage, homestead, residence, farmhouse, lodge"),
    "hotel": ("structure", "inn, caravanserai, resort, hostel"),
    "building": ("structure", "structure, skyscraper, hall, mill, factory, barn, warehouse, pavilion, "
                              "office, headquarters, courthouse, townhouse"),
    "tower": ("structure", "belfry, minaret, spire, campanile, clocktower"),
    "lighthouse": ("structure", ""),
    "museum": ("structure", "gallery"),
    "stadium": ("structure", "ballpark, arena, velodrome, racecourse, speedway, coliseum"),
    "theatre": ("structure", "theater, opera house, amphitheatre, amphitheater, opera, cinema, auditorium"),
    "school": ("structure", "university, college, academy, institute, institution, seminary"),
    "library": ("structure", ""),
    "observatory": ("structure", "telescope, planetarium"),
    "facility": ("structure", "centre, center, airport, hospital, prison, base, exhibition, zoo, "
                              "aquarium, nursery"),
    # built: transport, water works, public space
    "bridge": ("structure", "viaduct, aqueduct, footbridge"),
    "station": ("structure", "terminal, depot, terminus"),
    "railway": ("structure", "railroad, tramway, funicular, metro, subway"),
    "dam": ("structure", "weir, barrage"),
    "mine": ("structure", "quarry, colliery"),
    "pier": ("structure", "harbour, harbor, port, marina, dock, wharf, jetty, quay, seaport"),
    "square": ("structure", "plaza, piazza"),
    "street": ("structure", "avenue, road, boulevard, embankment, lane, promenade, highway, trail"),
    "market": ("structure", "bazaar, souk, mall"),
    "monument": ("structure", "memorial, statue, sculpture, obelisk, cross, column, fountain, arch, "
                              "altarpiece, mural"),
    "gate": ("structure", "gateway"),
    "wall": ("structure", ""),
    "cemetery": ("structure", "graveyard, necropolis"),
    "tomb": ("structure", "mausoleum, grave, crypt"),
    "site": ("structure", "ruin, ruins, excavation"),
    "park": ("structure", "garden, arboretum"),
    "reserve": ("landform", "refuge, wilderness"),
    # land and water (one family, as InfoSeek has lakes with mountains)
    "mountain": ("landform", "mount, peak, volcano, hill, butte, summit, ridge, pass, massif, plateau"),
    "island": ("landform", "islet, skerry, atoll, archipelago"),
    "beach": ("landform", "coast, cape, headland, peninsula, cove, cliff, dune, chine, shore"),
    "cave": ("landform", "cavern, grotto"),
    "valley": ("landform", "canyon, gorge, glen"),
    "rock": ("landform", "boulder, formation, crag"),
    "glacier": ("landform", ""),
    "lake": ("landform", "reservoir, pond, lagoon, loch, tarn"),
    "river": ("landform", "stream, creek, canal, brook, estuary"),
    "waterfall": ("landform", "cascade"),
    "bay": ("landform", "sea, gulf, strait, fjord"),
    # settlements
    "city": ("settlement", "capital, metropolis"),
    "town": ("settlement", "municipality, commune, borough"),
    "village": ("settlement", "hamlet"),
    "neighborhood": ("settlement", "neighbourhood, district, suburb, quarter, estate"),
    # organisms
    "plant": ("flora", "flower, shrub, bush, herb, grass, vine, weed, orchid, cactus, succulent, fern, "
                       "moss, wildflower, sedge, lily, daisy, thistle, clover, aster, climber"),
    "tree": ("flora", "palm, conifer, oak, pine, maple, willow, eucalyptus"),
    "fungus": ("flora", "mushroom, lichen, toadstool, mold, mould, bolete"),
    "bird": ("fauna", "owl, duck, hawk, eagle, parrot, hummingbird, gull, songbird, warbler, woodpecker, "
                      "heron, sparrow, finch, pigeon, dove, goose, swan, falcon, crow, raven, wren, "
                      "kingfisher, penguin, egret, tern, plover, sandpiper, grebe, cormorant, pelican"),
    "mammal": ("fauna", "monkey, bat, rodent, squirrel, deer, whale, dolphin, seal, fox, bear, rabbit, "
                        "hare, mouse, rat, shrew, vole, otter, weasel, antelope, primate, marsupial"),
    "animal": ("fauna", "creature, organism"),
    "reptile": ("fauna", "lizard, snake, turtle, tortoise, gecko, iguana, skink, crocodile, alligator, "
                         "chameleon, anole, terrapin"),
    "amphibian": ("fauna", "frog, toad, salamander, newt, treefrog"),
    "insect": ("fauna", "beetle, wasp, bee, ant, fly, mosquito, dragonfly, damselfly, grasshopper, cicada, "
                        "bug, termite, mantis, aphid, cockroach, hoverfly, bumblebee, hornet, ladybird, "
                        "ladybug, weevil, katydid, midge, sawfly, earwig, lacewing"),
    "butterfly": ("fauna", "moth, caterpillar, skipper"),
    "spider": ("fauna", "arachnid, scorpion, tick, mite, harvestman"),
    "fish": ("fauna", "shark, eel, trout, salmon, minnow, goby"),
    "mollusc": ("fauna", "mollusk, snail, slug, clam, oyster, mussel, octopus, squid, nudibranch, "
                         "limpet, whelk, chiton"),
    "crustacean": ("fauna", "crab, lobster, shrimp, crayfish, barnacle, isopod, woodlouse, prawn"),
    "worm": ("fauna", "earthworm, centipede, millipede, leech, starfish, jellyfish, coral, sponge, urchin"),
    "species": ("fauna", "subspecies, taxon, genus"),
    # other things
    "food": ("food", "dish, cheese, fruit, vegetable, drink, beverage, dessert, bread, wine, berry, nut"),
    "vehicle": ("vehicle", "car, ship, boat, train, locomotive, tram, bus"),
    "aircraft": ("vehicle", "airplane, aeroplane, plane, helicopter, airship"),
    "material": ("material", "mineral"),
}, modifiers=2, is_this=True)

VOCABULARIES: dict[str, Vocabulary] = {v.name: v for v in (INFOSEEK, EVQA)}


def vocabulary_name(dataset: str | None, sample_id: str = "") -> str:
    """Which vocabulary a sample gets: `evqa` for an E-VQA row (its dataset is inaturalist/landmarks/
    evqa, or its id the authors' `E-VQA_<n>`), otherwise `infoseek` (the default kbvqa has always had)."""
    if (dataset or "").strip().lower() in EVQA_DATASETS or str(sample_id).upper().startswith("E-VQA"):
        return EVQA.name
    return INFOSEEK.name


def all_families() -> dict[str, str]:
    """Type -> family over every vocabulary (a type both vocabularies have is in one family in both)."""
    out: dict[str, str] = {}
    for v in VOCABULARIES.values():
        for t, fam in v.families.items():
            if out.setdefault(t, fam) != fam:
                raise ValueError(f"type {t!r} is in family {out[t]!r} in one vocabulary and {fam!r} in another")
    return out
