from memoryd.entry import main

main()
