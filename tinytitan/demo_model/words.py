"""Word lists the demo corpus is generated from (pure data).

Any change here changes the tokenizer: bump ``recipe.RECIPE_REVISION`` so caches rebuild.
"""

ENGLISH = """
the of and to a in is it you that he was for on are with as I his they be at one have this from or had by
not word but what some we can out other were all there when up use your how said an each she which do their
time if will way about many then them write would like so these her long make thing see him two has look more
day could go come did number sound no most people my over know water than call first who may down side been now
find any new work part take get place made live where after back little only round man year came show every good
me give our under name very through just form sentence great think say help low line differ turn cause much mean
before move right boy old too same tell does set three want air well also play small end put home read hand port
large spell add even land here must big high such follow act why ask men change went light kind off need house
picture try us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never last let
thought city tree cross farm hard start might story saw far sea draw left late run while press close night real
life few north open seem together next white children begin got walk example ease paper group always music those
both mark often letter until mile river car feet care second book carry took science eat room friend began idea
fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual young ready
above ever red list though feel talk bird soon body dog family direct pose leave song measure door product black
short numeral class wind question happen complete ship area half rock order fire south problem piece told knew
pass since top whole king space heard best hour better true during hundred five remember step early hold west
ground interest reach fast verb sing listen six table travel less morning ten simple several vowel toward war lay
against pattern slow center love person money serve appear road map rain rule govern pull cold notice voice unit
power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct able
pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free minute
strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force blue
object decide surface deep moon island foot system busy test record boat common gold possible plane stead dry
wonder laugh thousand ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill east
paint language among grand ball yet wave drop heart am present heavy dance engine position arm wide sail material
size vary settle speak weight general ice matter circle pair include divide syllable felt perhaps pick sudden
count square reason length represent art subject region energy hunt probable bed brother egg ride cell believe
fraction forest sit race window store summer train sleep prove lone leg exercise wall catch mount wish sky board
joy winter sat written wild instrument kept glass grass cow job edge sign visit past soft fun bright gas weather
month million bear finish happy hope flower clothe strange gone jump baby eight village meet root buy raise solve
metal whether push seven paragraph third shall held hair describe cook floor either result burn hill safe cat
century consider type law bit coast copy phrase silent tall sand soil roll temperature finger industry value fight
lie beat excite natural view sense ear else quite broke case middle kill son lake moment scale loud spring observe
child straight consonant nation dictionary milk speed method organ pay age section dress cloud surprise quiet stone
tiny climb cool design poor lot experiment bottom key iron single stick flat twenty skin smile crease hole trade
melody trip office receive row mouth exact symbol die least trouble shout except wrote seed tone join suggest clean
break lady yard rise bad blow oil blood touch grew cent mix team wire cost lost brown wear garden equal sent choose
fell fit flow fair bank collect save control decimal gentle woman captain practice separate difficult doctor please
protect noon whose locate ring character insect caught period indicate radio spoke atom human history effect
electric expect crop modern element hit student corner party supply bone rail imagine provide agree thus capital
chair danger fruit rich thick soldier process operate guess necessary sharp wing create neighbor wash bat rather
crowd corn compare poem string bell depend meat rub tube famous dollar stream fear sight thin triangle planet hurry
chief colony clock mine tie enter major fresh search send yellow gun allow print dead spot desert suit current lift
rose continue block chart hat sell success company subtract event particular deal swim term opposite wife shoe
shoulder spread arrange camp invent cotton born determine quart nine truck noise level chance gather shop stretch
throw shine property column molecule select wrong gray repeat require broad prepare salt nose plural anger claim
continent oxygen sugar death pretty skill women season solution magnet silver thank branch match suffix especially
fig afraid huge sister steel discuss forward similar guide experience score apple bought led pitch coat mass card
band rope slip win dream evening condition feed tool total basic smell valley nor double seat arrive master track
parent shore division sheet substance favor connect post spend chord fat glad original share station dad bread
charge proper bar offer segment slave duck instant market degree populate chick dear enemy reply drink occur
support speech nature range steam motion path liquid log meant quotient teeth shell neck
"""

TECH = """
file files directory path paths error errors warning message messages request response server client model models
token tokens tokenizer prompt prompts cache caches batch batches stream streaming buffer buffers queue queues thread
threads process processes memory device tensor tensors array arrays weight weights layer layers attention
embedding embeddings config configuration option options argument arguments parameter parameters function
functions method methods class classes object objects instance instances module modules package packages import
export library libraries version versions build builds test tests testing debug release install update upgrade
deploy commit branch merge rebase push pull clone repository project projects source code data database query
queries schema table tables index indexes key keys value values string strings integer float boolean list lists
dict dictionary tuple set sets map maps filter reduce sort search result results output input inputs outputs
event events handler handlers callback callbacks async await promise future task tasks worker workers job jobs
timeout timeouts retry retries limit limits rate size length count total offset start stop begin finish done
status state states session sessions user users admin account accounts login logout password email address
network socket port host hostname url uri http https json yaml toml xml html css javascript python rust golang
java typescript shell bash terminal command commands script scripts line lines column columns row rows text
format formats parse parser parsing serialize deserialize encode decode encoding decoding read write open close
create delete remove insert append extend update replace copy move rename exists check validate verify assert
raise except finally return yield lambda global nonlocal pass break continue while for if elif else try with
def import from as class none true false null undefined self this super init main run call invoke execute
apply compute calculate generate render load save dump fetch send receive connect disconnect listen bind accept
tool tools call calls reasoning thinking assistant system chat completion completions sampling temperature
logits logprobs probability greedy beam decoder encoder transformer vocabulary merge merges prefix suffix
chunk chunks window context length max min mean median sum average ratio percent metric metrics benchmark
latency throughput performance speed memory usage profile profiler trace traces log logs logger logging
""".split()

PY_KEYWORDS = """False None True and as assert async await break class continue def del elif else except
finally for from global if import in is lambda nonlocal not or pass raise return try while with yield""".split()

PY_BUILTINS = """print len range list dict set tuple str int float bool isinstance getattr setattr hasattr
enumerate zip sorted reversed min max sum any all open map filter super type object repr format iter next
ValueError TypeError KeyError IndexError RuntimeError Exception NotImplementedError StopIteration""".split()

NAMES = """Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent Victor Walter
London Paris Berlin Tokyo Madrid Rome Oslo Lisbon Vienna Prague Dublin Boston Chicago Denver Seattle Austin
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August
September October November December Python Linux GitHub Apple MLX Qwen Claude Codex OpenAI""".split()

ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
          "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sk", "sl", "st", "str", "th", "tr"]
NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "oo", "ou", "y"]
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rt", "st", "ck", "x"]

PUNCT_END = [".", ".", ".", ".", "?", "!", ":"]
EXTS = ["py", "rs", "js", "ts", "json", "md", "txt", "toml", "yaml", "sh", "c", "h", "go"]
OPS = ["+", "-", "*", "/", "//", "%", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "is not"]
AUG = ["=", "+=", "-=", "*=", "|=", ":="]


SUFFIXES = ["s", "s", "ed", "ing", "er", "ers", "ly", "ion", "ions", "able", "ness", "ment", "ful", "less",
            "ity", "al", "ive", "ize", "ized", "ization", "ous", "est", "ist", "ism", "ence", "ance", "ship"]
PREFIXES = ["un", "re", "pre", "dis", "over", "sub", "inter", "non", "multi", "auto", "co", "de", "mis", "super"]
